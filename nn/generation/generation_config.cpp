// GenerationConfig: its checks and transformers' generation_config.json.
#include <cmath>
#include <filesystem>

#include "io/file.h"
#include "io/json.h"
#include "nn/generation/generation.h"

namespace tg::nn {
namespace {

constexpr const char* kOp = "GenerationConfig";

// The sampler divides float32 logits by the temperature and the repetition penalty: below this
// the quotient overflows float32 for logits beyond 3.4e32, and from about 1e-45 the divisor is 0
// as a float.
constexpr double kMinDivisor = 1e-6;

// generation_config.json fields that change what transformers generates, with the value that
// leaves generation as tapegrad implements it (null: the field must be absent or null).
struct Unsupported {
  const char* field;
  json::Value neutral;
};
const Unsupported kUnsupported[] = {
    {"num_beams", 1},           {"num_beam_groups", 1},          {"penalty_alpha", nullptr},
    {"min_length", 0},          {"min_new_tokens", nullptr},     {"no_repeat_ngram_size", 0},
    {"typical_p", 1.0},         {"min_p", nullptr},              {"epsilon_cutoff", 0.0},
    {"eta_cutoff", 0.0},        {"diversity_penalty", 0.0},      {"encoder_repetition_penalty", 1.0},
    {"bad_words_ids", nullptr}, {"suppress_tokens", nullptr},    {"begin_suppress_tokens", nullptr},
    {"forced_bos_token_id", nullptr}, {"forced_eos_token_id", nullptr}, {"sequence_bias", nullptr},
    {"exponential_decay_length_penalty", nullptr}, {"renormalize_logits", false}, {"stop_strings", nullptr},
    {"max_time", nullptr},      {"guidance_scale", nullptr},     {"watermarking_config", nullptr},
};

bool same_value(const json::Value& a, const json::Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  return json::dump(a) == json::dump(b);
}

std::vector<int32_t> token_ids(const json::Value& v, const std::string& what) {
  std::vector<int32_t> ids;
  if (v.is_null()) return ids;
  const std::vector<json::Value> items = v.is_array() ? v.as_array(what) : std::vector<json::Value>{v};
  for (const json::Value& item : items) {
    const int64_t id = item.as_int(what);
    TG_CHECK(id >= 0 && id <= INT32_MAX, kOp, what, " holds ", id, ", wants token ids >= 0");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

void GenerationConfig::validate() const {
  TG_CHECK(max_new_tokens >= 1, kOp, "max_new_tokens must be at least 1, got ", max_new_tokens);
  TG_CHECK(std::isfinite(temperature) && temperature >= 0, kOp, "temperature must be >= 0 (0: greedy), got ",
           temperature);
  TG_CHECK(temperature == 0 || temperature >= kMinDivisor, kOp, "temperature ", temperature, " is below ", kMinDivisor,
           ": logits / temperature overflow float32 (0 is greedy)");
  TG_CHECK(top_k >= 0, kOp, "top_k must be >= 0 (0: off), got ", top_k);
  TG_CHECK(top_p > 0 && top_p <= 1, kOp, "top_p must be in (0, 1] (1: off), got ", top_p);
  TG_CHECK(std::isfinite(repetition_penalty) && repetition_penalty >= kMinDivisor, kOp, "repetition_penalty must be >= ",
           kMinDivisor, " (1: off; logits / repetition_penalty overflow float32 below it), got ", repetition_penalty);
  for (int32_t id : eos_token_id) TG_CHECK(id >= 0, kOp, "eos_token_id holds ", id, ", wants token ids >= 0");
  TG_CHECK(cache_implementation == "dynamic" || cache_implementation == "static", kOp, "cache_implementation '",
           cache_implementation, "' is not supported, wants 'dynamic' or 'static'");
  TG_CHECK(!cuda_graph || cache_implementation == "static", kOp,
           "cuda_graph wants cache_implementation 'static' (a graph replays fixed shapes), got '", cache_implementation,
           "'");
  if (do_sample) return;
  // transformers warns and ignores these; here a value that would silently do nothing is an error.
  TG_CHECK(temperature == 1.0 || temperature == 0.0, kOp, "temperature ", temperature,
           " is set but do_sample is false (greedy): set do_sample = true to sample");
  TG_CHECK(top_k == 50, kOp, "top_k ", top_k, " is set but do_sample is false (greedy): set do_sample = true to sample");
  TG_CHECK(top_p == 1.0, kOp, "top_p ", top_p, " is set but do_sample is false (greedy): set do_sample = true to sample");
}

GenerationConfig GenerationConfig::from_pretrained(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path gen = fs::path(dir) / "generation_config.json", model = fs::path(dir) / "config.json";
  const bool own = fs::exists(gen);
  TG_CHECK(own || fs::exists(model), kOp, "neither generation_config.json nor config.json in '", dir, "'");
  const std::string source = (own ? gen : model).string();
  const std::vector<uint8_t> bytes = io::read_file(source, io::kMaxConfigBytes);
  json::Value v;
  try {
    v = json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const Error& e) {
    fail(kOp, "'", source, "': ", e.what());
  }
  TG_CHECK(v.is_object(), kOp, "'", source, "' is not a JSON object");
  GenerationConfig c;
  auto field = [&](const char* key) -> const json::Value* {
    const json::Value* f = v.find(key);
    return f && !f->is_null() ? f : nullptr;
  };
  const std::string where = "'" + source + "': ";
  try {
    if (const json::Value* f = field("eos_token_id")) c.eos_token_id = token_ids(*f, where + "eos_token_id");
    if (!own) return c;  // config.json: only the EOS ids, as transformers' from_model_config
    for (const Unsupported& u : kUnsupported)
      if (const json::Value* f = field(u.field); f && !same_value(*f, u.neutral))
        fail(kOp, where, u.field, " = ", json::dump(*f), " is not supported (tapegrad generates greedily or by sampling, "
             "without beams or other constraints)");
    if (const json::Value* f = field("max_new_tokens")) c.max_new_tokens = f->as_int(where + "max_new_tokens");
    if (const json::Value* f = field("do_sample")) c.do_sample = f->as_bool(where + "do_sample");
    if (c.do_sample) {  // a greedy file's sampling fields are unused (transformers warns and ignores them)
      if (const json::Value* f = field("temperature")) c.temperature = f->as_double(where + "temperature");
      if (const json::Value* f = field("top_k")) c.top_k = f->as_int(where + "top_k");
      if (const json::Value* f = field("top_p")) c.top_p = f->as_double(where + "top_p");
    }
    if (const json::Value* f = field("cache_implementation"))
      c.cache_implementation = f->as_string(where + "cache_implementation");
    if (const json::Value* f = field("repetition_penalty"))
      c.repetition_penalty = f->as_double(where + "repetition_penalty");
    c.validate();
  } catch (const Error& e) {  // every error names the file
    std::string msg = e.what();
    if (msg.find(source) != std::string::npos) throw;
    const std::string own_prefix = std::string(kOp) + ": ";
    if (msg.rfind(own_prefix, 0) == 0) msg.erase(0, own_prefix.size());
    fail(kOp, where, msg);
  }
  return c;
}

}  // namespace tg::nn
