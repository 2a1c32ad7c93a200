#include "nn/pretrained.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/primitives.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "ops/shape.h"

namespace tg::nn {
namespace {

namespace fs = std::filesystem;
const std::string kConfig = "config.json", kWeights = "model.safetensors", kIndex = "model.safetensors.index.json";
const std::string kHead = "lm_head.weight";

// What differs between the architectures on disk.
struct Arch {
  std::string architecture;  // config.json's "architectures" entry
  std::string model_type;
  std::string base_prefix;  // the base model inside the LM; checkpoints of the base model alone lack it
  std::string embedding;    // the input embedding lm_head.weight may be tied to
  // Buffers older transformers versions saved and tapegrad recomputes (causal masks, RoPE tables).
  std::vector<std::string> ignored_suffixes;
};
const Arch kLlama{"LlamaForCausalLM", "llama", "model.", "model.embed_tokens.weight", {".rotary_emb.inv_freq"}};
const Arch kGPT2{"GPT2LMHeadModel", "gpt2", "transformer.", "transformer.wte.weight", {".attn.bias", ".attn.masked_bias"}};

// Every size in config.json is at most this (int32's range, as in transformers' checkpoints), so
// products of two sizes cannot overflow; tensors too large to allocate are refused when built.
constexpr int64_t kMaxSize = INT32_MAX;

// config.json's fields, with errors naming the file, the field and its value. Absent and null
// fields take transformers' defaults: save_pretrained leaves out some values equal to them.
class Fields {
 public:
  Fields(json::Value v, std::string source) : v_(std::move(v)), source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  const json::Value* get(const std::string& key) const {
    const json::Value* f = v_.find(key);
    return f && !f->is_null() ? f : nullptr;
  }
  // A size or count in [lo, kMaxSize]: checked before any arithmetic uses it.
  int64_t integer(const std::string& key, int64_t fallback, int64_t lo = 1) const {
    const json::Value* f = get(key);
    if (f && !(f->is_int() && f->as_int() >= lo && f->as_int() <= kMaxSize))
      bad(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(kMaxSize) + "]");
    return f ? f->as_int() : fallback;
  }
  // A finite number in [lo, hi].
  double number(const std::string& key, double fallback, double lo = 0, double hi = HUGE_VAL) const {
    const json::Value* f = get(key);
    if (f && !(f->is_number() && std::isfinite(f->as_double()) && f->as_double() >= lo && f->as_double() <= hi))
      bad(key, "a finite number in [" + json::dump(lo) + ", " + (std::isinf(hi) ? "inf" : json::dump(hi)) + "]");
    return f ? f->as_double() : fallback;
  }
  // A dropout probability: [0, 1), as the attention kernels take it (1 would drop everything).
  double probability(const std::string& key, double fallback) const {
    const double p = number(key, fallback, 0, 1);
    if (p == 1) bad(key, "a probability in [0, 1)");
    return p;
  }
  bool boolean(const std::string& key, bool fallback) const {
    const json::Value* f = get(key);
    if (f && !f->is_bool()) bad(key, "true or false");
    return f ? f->as_bool() : fallback;
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    const json::Value* f = get(key);
    if (f && !f->is_string()) bad(key, "a string");
    return f ? f->as_string() : fallback;
  }
  [[noreturn]] void unsupported(const std::string& key, const std::string& wanted) const {
    fail("from_pretrained", "'", source_, "': ", key, " = ", json::dump(v_.find(key) ? *v_.find(key) : json::Value()),
         " is not supported (", wanted, ")");
  }
  [[noreturn]] void bad(const std::string& key, const std::string& wanted) const {
    fail("from_pretrained", "'", source_, "': ", key, " is ", json::dump(*v_.find(key)), ", wants ", wanted);
  }

 private:
  json::Value v_;
  std::string source_;
};

Fields parse_fields(const std::vector<uint8_t>& bytes, const std::string& source) {
  json::Value v;
  try {
    v = json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const Error& e) {
    fail("from_pretrained", "'", source, "': ", e.what());
  }
  TG_CHECK(v.is_object(), "from_pretrained", "'", source, "' is a JSON ", json::Value::type_name(v.type()),
           ", wants an object");
  return Fields(std::move(v), source);
}

// The folder, opened once so that every file comes from one save (see io::Folder).
io::Folder open_model_folder(const std::string& dir) {
  TG_CHECK(fs::is_directory(dir), "from_pretrained", "no ", kConfig, " in '", dir,
           "' (a transformers model folder holds config.json and model.safetensors)");
  return io::Folder(dir);
}

Fields read_config(const io::Folder& dir) {
  TG_CHECK(dir.has_file(kConfig), "from_pretrained", "no ", kConfig, " in '", dir.path(),
           "' (a transformers model folder holds config.json and model.safetensors)");
  return parse_fields(dir.read(kConfig), dir.path_of(kConfig));
}

const Arch& architecture(const Fields& f) {
  std::string name;
  if (const json::Value* a = f.get("architectures")) {
    if (!a->is_array() || a->size() != 1 || !a->as_array()[0].is_string())
      f.unsupported("architectures", "wants one name: LlamaForCausalLM or GPT2LMHeadModel");
    name = a->as_array()[0].as_string();
  }
  const std::string type = f.string("model_type", "");
  TG_CHECK(!name.empty() || !type.empty(), "from_pretrained", "'", f.source(),
           "' names neither architectures nor model_type");
  for (const Arch* arch : {&kLlama, &kGPT2}) {
    if (name.empty() ? type != arch->model_type : name != arch->architecture) continue;
    if (!type.empty() && type != arch->model_type)
      f.unsupported("model_type", arch->architecture + " wants model_type \"" + arch->model_type + "\"");
    return *arch;
  }
  if (!name.empty()) f.unsupported("architectures", "supported: LlamaForCausalLM, GPT2LMHeadModel");
  f.unsupported("model_type", "supported: llama, gpt2");
}

void expect_architecture(const Fields& f, const Arch& want, const char* op) {
  const Arch& got = architecture(f);
  TG_CHECK(&got == &want, op, "'", f.source(), "' describes a ", got.architecture, ", wants ", want.architecture,
           " (from_pretrained loads either)");
}

// RoPE options: transformers 5 writes rope_parameters {"rope_type": "default", "rope_theta": ...},
// older versions rope_theta beside rope_scaling (null unless scaled). Only unscaled RoPE is
// implemented.
void read_rope(const Fields& f, const std::string& key, double& theta) {
  const json::Value* r = f.get(key);
  if (!r) return;
  const json::Value* type = r->is_object() ? r->find("rope_type") : nullptr;
  if (r->is_object() && !type) type = r->find("type");  // the name before transformers 4.45
  if (!r->is_object() || (type && !(type->is_string() && type->as_string() == "default")))
    f.unsupported(key, "only the default RoPE: scaled RoPE is not implemented");
  if (const json::Value* t = r->find("rope_theta"); t && !t->is_null()) {
    if (!t->is_number() || !std::isfinite(t->as_double()) || t->as_double() <= 0)
      fail("from_pretrained", "'", f.source(), "': ", key, ".rope_theta is ", json::dump(*t), ", wants a finite number > 0");
    theta = t->as_double();
  }
}

template <class Config>
Config validated(const Fields& f, const Config& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    fail("from_pretrained", "'", f.source(), "': ", e.what());
  }
  return c;
}

LlamaConfig llama_config(const Fields& f) {
  LlamaConfig c;
  // transformers' LlamaConfig defaults (rms_norm_eps differs from tapegrad's tiny configs).
  c.vocab_size = f.integer("vocab_size", 32000);
  c.hidden_size = f.integer("hidden_size", 4096);
  c.intermediate_size = f.integer("intermediate_size", 11008);
  c.num_hidden_layers = f.integer("num_hidden_layers", 32);
  c.num_attention_heads = f.integer("num_attention_heads", 32);
  c.num_key_value_heads = f.integer("num_key_value_heads", 0, /*lo=*/0);  // 0: num_attention_heads
  c.max_position_embeddings = f.integer("max_position_embeddings", 2048);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.initializer_range = f.number("initializer_range", 0.02);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.rope_theta = f.number("rope_theta", 10000.0, /*lo=*/1e-300);
  read_rope(f, "rope_scaling", c.rope_theta);
  read_rope(f, "rope_parameters", c.rope_theta);
  if (f.boolean("attention_bias", false)) f.unsupported("attention_bias", "wants false: q/k/v/o_proj have no bias here");
  if (f.boolean("mlp_bias", false)) f.unsupported("mlp_bias", "wants false: gate/up/down_proj have no bias here");
  if (f.string("hidden_act", "silu") != "silu") f.unsupported("hidden_act", "wants \"silu\"");
  if (f.probability("attention_dropout", 0.0) != 0.0) f.unsupported("attention_dropout", "wants 0.0");
  // Both factors are at most kMaxSize and num_attention_heads >= 1: no overflow, no division by 0.
  const int64_t head_dim = f.integer("head_dim", 0, /*lo=*/0);
  if (head_dim != 0 && head_dim * c.num_attention_heads != c.hidden_size)
    f.unsupported("head_dim", "wants hidden_size / num_attention_heads = " +
                                  std::to_string(c.hidden_size / c.num_attention_heads));
  return validated(f, c);
}

GPT2Config gpt2_config(const Fields& f) {
  GPT2Config c;  // its defaults are transformers' GPT2Config defaults
  c.vocab_size = f.integer("vocab_size", c.vocab_size);
  c.n_positions = f.integer("n_positions", c.n_positions);
  c.n_embd = f.integer("n_embd", c.n_embd);
  c.n_layer = f.integer("n_layer", c.n_layer);
  c.n_head = f.integer("n_head", c.n_head);
  c.n_inner = f.integer("n_inner", 0, /*lo=*/0);  // 0: 4 n_embd
  c.layer_norm_epsilon = f.number("layer_norm_epsilon", c.layer_norm_epsilon);
  c.initializer_range = f.number("initializer_range", c.initializer_range);
  c.embd_pdrop = f.probability("embd_pdrop", c.embd_pdrop);
  c.attn_pdrop = f.probability("attn_pdrop", c.attn_pdrop);
  c.resid_pdrop = f.probability("resid_pdrop", c.resid_pdrop);
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    f.unsupported("activation_function", "wants \"gelu_new\" or \"gelu_pytorch_tanh\" (GELU, tanh approximation)");
  if (!f.boolean("scale_attn_weights", true)) f.unsupported("scale_attn_weights", "wants true");
  if (f.boolean("scale_attn_by_inverse_layer_idx", false)) f.unsupported("scale_attn_by_inverse_layer_idx", "wants false");
  if (f.boolean("add_cross_attention", false)) f.unsupported("add_cross_attention", "wants false");
  if (!f.boolean("tie_word_embeddings", true))
    f.unsupported("tie_word_embeddings", "wants true: GPT2LMHeadModel's lm_head is wte");
  return validated(f, c);
}

json::Value llama_json(const LlamaConfig& c) {
  using json::Value;
  return Value::object()
      .set("architectures", Value::array({kLlama.architecture}))
      .set("model_type", kLlama.model_type)
      .set("vocab_size", c.vocab_size)
      .set("hidden_size", c.hidden_size)
      .set("intermediate_size", c.intermediate_size)
      .set("num_hidden_layers", c.num_hidden_layers)
      .set("num_attention_heads", c.num_attention_heads)
      .set("num_key_value_heads", c.kv_heads())
      .set("head_dim", c.head_dim())
      .set("hidden_act", "silu")
      .set("max_position_embeddings", c.max_position_embeddings)
      .set("initializer_range", c.initializer_range)
      .set("rms_norm_eps", c.rms_norm_eps)
      // Both spellings, so that transformers 4 and 5 read the same theta.
      .set("rope_theta", c.rope_theta)
      .set("rope_parameters", Value::object().set("rope_theta", c.rope_theta).set("rope_type", "default"))
      .set("attention_bias", false)
      .set("attention_dropout", 0.0)
      .set("mlp_bias", false);
}

json::Value gpt2_json(const GPT2Config& c) {
  using json::Value;
  return Value::object()
      .set("architectures", Value::array({kGPT2.architecture}))
      .set("model_type", kGPT2.model_type)
      .set("vocab_size", c.vocab_size)
      .set("n_positions", c.n_positions)
      .set("n_embd", c.n_embd)
      .set("n_layer", c.n_layer)
      .set("n_head", c.n_head)
      .set("n_inner", c.n_inner ? Value(c.n_inner) : Value())
      .set("activation_function", "gelu_new")
      .set("layer_norm_epsilon", c.layer_norm_epsilon)
      .set("initializer_range", c.initializer_range)
      .set("embd_pdrop", c.embd_pdrop)
      .set("attn_pdrop", c.attn_pdrop)
      .set("resid_pdrop", c.resid_pdrop)
      .set("scale_attn_weights", true)
      .set("tie_word_embeddings", true);
}

bool is_conv1d_weight(const Module& model, const std::string& name) {
  const std::string suffix = ".weight";
  return name.ends_with(suffix) && is_hf_conv1d(model, name.substr(0, name.size() - suffix.size()));
}

// "lm_head.weight" when it is the embedding's tensor (transformers then writes only the
// embedding and ignores a saved head), else "".
std::string tied_head(const StateDict& own, const Arch& arch) {
  auto head = own.find(kHead), emb = own.find(arch.embedding);
  return head != own.end() && emb != own.end() && head->second.same(emb->second) ? kHead : "";
}

bool is_shard_name(const std::string& name) {
  return name.starts_with("model-") && name.ends_with(".safetensors") && name.find("-of-") != std::string::npos;
}

// The weight files of `dir`, each with the tensors the index says it holds (none for a single file).
std::map<std::string, std::vector<std::string>> weight_files(const io::Folder& dir) {
  if (dir.has_file(kWeights)) return {{kWeights, {}}};
  const std::string index_path = dir.path_of(kIndex);
  if (!dir.has_file(kIndex)) {
    const bool bin = dir.exists("pytorch_model.bin") || dir.exists("pytorch_model.bin.index.json");
    fail("from_pretrained", "'", dir.path(), "' has neither ", kWeights, " nor ", kIndex,
         bin ? " (pytorch_model.bin is not read: convert it to safetensors)" : "");
  }
  std::vector<uint8_t> bytes = dir.read(kIndex);
  json::Value index;
  try {
    index = json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const Error& e) {
    fail("from_pretrained", "'", index_path, "': ", e.what());
  }
  const json::Value* map = index.is_object() ? index.find("weight_map") : nullptr;
  TG_CHECK(map && map->is_object() && map->size() > 0, "from_pretrained", "'", index_path,
           "' has no weight_map object naming the shard of each tensor");
  std::map<std::string, std::vector<std::string>> files;
  for (size_t i = 0; i < map->size(); ++i) {
    const std::string& key = map->keys()[i];
    const json::Value& file = map->values()[i];
    TG_CHECK(file.is_string() && !file.as_string().empty() && file.as_string().find('/') == std::string::npos &&
                 file.as_string() != "..",
             "from_pretrained", "'", index_path, "': weight_map[\"", key, "\"] is ", json::dump(file),
             ", wants a file name in the same folder");
    TG_CHECK(dir.has_file(file.as_string()), "from_pretrained", "'", index_path, "' puts '", key, "' in '",
             file.as_string(), "', but '", dir.path_of(file.as_string()), "' does not exist");
    files[file.as_string()].push_back(key);
  }
  return files;
}

// Reads every weight file into the model's parameters (any dtype and device), checking that the
// files hold exactly the model's tensors.
void load_weights(Module& model, const Arch& arch, const io::Folder& dir) {
  const StateDict own = model.state_dict();
  const std::string tied = tied_head(own, arch);
  std::set<std::string> loaded;
  std::vector<std::string> unexpected, mismatched, missing;
  NoGradGuard no_grad;
  for (const auto& [name, indexed] : weight_files(dir)) {
    const std::string path = dir.path_of(name);
    const std::vector<uint8_t> bytes = dir.read(name);
    const safetensors::TensorMap file = safetensors::deserialize(bytes.data(), bytes.size(), path).tensors;
    for (const auto& key : indexed)
      TG_CHECK(file.count(key), "from_pretrained", "'", dir.path_of(kIndex), "' puts '", key, "' in '", path,
               "', which does not hold it");
    for (const auto& [key, value] : file) {
      const std::string name = own.count(key) || key == tied ? key : arch.base_prefix + key;
      if (name == tied) continue;
      auto it = own.find(name);
      if (it == own.end()) {
        bool ignored = false;
        for (const auto& s : arch.ignored_suffixes) ignored = ignored || key.ends_with(s);
        if (!ignored) unexpected.push_back(key);
        continue;
      }
      const bool conv1d = is_conv1d_weight(model, name);
      Shape want = it->second.shape();
      if (conv1d) std::swap(want[0], want[1]);  // Conv1D stores [in, out]
      if (value.shape() != want) {
        mismatched.push_back(key + " (file " + shape_str(value.shape()) + ", config.json wants " + shape_str(want) + ")");
        continue;
      }
      copy_(it->second, conv1d ? transpose(value, 0, 1) : value);
      loaded.insert(name);
    }
  }
  for (const auto& [name, t] : own)
    if (!loaded.count(name) && name != tied) missing.push_back(name);
  if (missing.empty() && unexpected.empty() && mismatched.empty()) return;
  std::string msg = "the weights in '" + dir.path() + "' do not fit the " + arch.architecture + " of its config.json:";
  if (!missing.empty()) msg += "\n  missing (" + std::to_string(missing.size()) + "): " + name_list(missing);
  if (!unexpected.empty()) msg += "\n  unexpected (" + std::to_string(unexpected.size()) + "): " + name_list(unexpected);
  if (!mismatched.empty()) msg += "\n  wrong shape (" + std::to_string(mismatched.size()) + "): " + name_list(mismatched);
  fail("from_pretrained", msg);
}

template <class Model, class Config>
std::shared_ptr<Model> build(const Config& config, const Arch& arch, const io::Folder& dir, const PretrainedOptions& o) {
  Generator gen(0);  // the initial values are overwritten; the caller's default generator is left alone
  auto model = std::make_shared<Model>(config, gen);
  model->to(o.dtype, o.device);
  load_weights(*model, arch, dir);
  model->eval();  // as transformers' from_pretrained
  return model;
}

// Writes `tensors` as model.safetensors, or as shards of at most max_shard_bytes (a larger
// tensor gets a shard of its own) and model.safetensors.index.json.
void write_weights(io::FolderWriter& out, const safetensors::TensorMap& tensors, int64_t max_shard_bytes) {
  const safetensors::Metadata meta{{"format", "pt"}};  // transformers refuses files without it
  std::vector<safetensors::TensorMap> shards(1);
  int64_t shard_bytes = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const auto n = static_cast<int64_t>(t.nbytes());
    if (max_shard_bytes > 0 && shard_bytes > 0 && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back()[name] = t;
    shard_bytes += n;
    total += n;
  }
  if (shards.size() == 1) return safetensors::write_file(out, kWeights, shards[0], meta);
  json::Value map = json::Value::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    safetensors::write_file(out, name, shards[i], meta);
    for (const auto& [key, t] : shards[i]) map.set(key, std::string(name));
  }
  json::Value index = json::Value::object()
                          .set("metadata", json::Value::object().set("total_size", total))
                          .set("weight_map", map);
  out.write(kIndex, json::dump(index, 2, /*sort_keys=*/true) + "\n");
}

}  // namespace

bool is_hf_conv1d(const Module& model, const std::string& path) {
  if (!dynamic_cast<const GPT2LMHeadModel*>(&model) || !path.starts_with("transformer.h.")) return false;
  for (const char* layer : {".c_attn", ".c_proj", ".c_fc"})
    if (path.ends_with(layer)) return true;
  return false;
}

PretrainedConfig parse_pretrained_config(const std::string& json_text, const std::string& source) {
  const Fields f = parse_fields(std::vector<uint8_t>(json_text.begin(), json_text.end()), source);
  if (&architecture(f) == &kLlama) return llama_config(f);
  return gpt2_config(f);
}

std::shared_ptr<LlamaForCausalLM> from_pretrained_llama(const std::string& dir, const PretrainedOptions& options) {
  const io::Folder folder = open_model_folder(dir);
  Fields f = read_config(folder);
  expect_architecture(f, kLlama, "from_pretrained_llama");
  return build<LlamaForCausalLM>(llama_config(f), kLlama, folder, options);
}

std::shared_ptr<GPT2LMHeadModel> from_pretrained_gpt2(const std::string& dir, const PretrainedOptions& options) {
  const io::Folder folder = open_model_folder(dir);
  Fields f = read_config(folder);
  expect_architecture(f, kGPT2, "from_pretrained_gpt2");
  return build<GPT2LMHeadModel>(gpt2_config(f), kGPT2, folder, options);
}

std::shared_ptr<Module> from_pretrained(const std::string& dir, const PretrainedOptions& options) {
  const io::Folder folder = open_model_folder(dir);
  Fields f = read_config(folder);
  if (&architecture(f) == &kLlama) return build<LlamaForCausalLM>(llama_config(f), kLlama, folder, options);
  return build<GPT2LMHeadModel>(gpt2_config(f), kGPT2, folder, options);
}

void save_pretrained(const Module& model, const std::string& dir, const SaveOptions& options) {
  const Arch* arch = nullptr;
  json::Value config;
  if (const auto* llama = dynamic_cast<const LlamaForCausalLM*>(&model)) {
    arch = &kLlama;
    config = llama_json(llama->config);
  } else if (const auto* gpt2 = dynamic_cast<const GPT2LMHeadModel*>(&model)) {
    arch = &kGPT2;
    config = gpt2_json(gpt2->config);
  } else {
    fail("save_pretrained", model.type_name(), " has no transformers counterpart (LlamaForCausalLM, GPT2LMHeadModel)");
  }
  TG_CHECK(options.max_shard_bytes >= 0, "save_pretrained", "max_shard_bytes must be >= 0, got ",
           options.max_shard_bytes);
  const StateDict own = model.state_dict();
  const std::string tied = tied_head(own, *arch);
  safetensors::TensorMap tensors;
  NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    TG_CHECK(!name.ends_with(".lora_A.weight") && !name.ends_with(".lora_B.weight"), "save_pretrained", "'", name,
             "' is a LoRA weight: merge_and_unload the model first, or save the adapter with peft::save_adapter");
    if (name == tied) continue;
    tensors[name] = is_conv1d_weight(model, name) ? contiguous(transpose(t, 0, 1)) : t;
  }
  if (arch == &kLlama) config.set("tie_word_embeddings", !tied.empty());
  config.set("dtype", dtype_name(own.at(arch->embedding).dtype()));  // transformers 5 loads in this dtype

  // One unit: a reader never sees the new config.json beside the old weights. Weights of the
  // other layout left by an earlier save are dropped; everything else in the folder stays.
  io::write_folder_atomic(
      dir,
      [&](io::FolderWriter& out) {
        write_weights(out, tensors, options.max_shard_bytes);
        out.write(kConfig, json::dump(config, 2, /*sort_keys=*/true) + "\n");
      },
      [](const std::string& name) { return name == kWeights || name == kIndex || is_shard_name(name); });
}

}  // namespace tg::nn
