#include "train/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/models/pretrained.h"

namespace tg::train {
namespace {

// config.json's size under either family's name (Llama-like, GPT-2), 0 when absent.
int64_t config_size(const json::Value& config, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (const json::Value* v = config.find(k); v && v->is_int() && v->as_int() > 0) return v->as_int();
  return 0;
}

bool is_embedding(const std::string& name) {
  return name.find("embed") != std::string::npos || name.find("wte.") != std::string::npos ||
         name.find("wpe.") != std::string::npos || name.find("lm_head") != std::string::npos;
}

// The module path of a 2-D ".weight" tensor that LoRA would wrap, as peft matches it.
bool targeted(const std::string& name, const std::vector<std::string>& targets) {
  if (!name.ends_with(".weight") || is_embedding(name)) return false;
  const std::string path = name.substr(0, name.size() - 7);
  for (const std::string& t : targets)
    if (t == "all-linear" || path == t || path.ends_with("." + t)) return true;
  return false;
}

constexpr int64_t kLossChunkBytes = int64_t{256} << 20;  // linear_cross_entropy's logits a chunk at most

// The activations of a micro-batch (docs/gpu.md's long-context plan): what one decoder layer
// keeps for its backward per token (the norms' outputs, q / k / v before and after RoPE, attention's
// output, the residual sums; the MLP's gate, up and their product, per chunk when tiled), the
// transients of its backward, the checkpoints, and the head's chunked loss.
void plan_activations(const ModelSizes& m, const MemoryEstimateOptions& o, MemoryEstimate& e) {
  const int64_t elt = static_cast<int64_t>(element_size(o.dtype));
  const int64_t tokens = o.batch * o.seq;
  const int64_t mlp_tokens = o.mlp_chunk_tokens > 0 ? std::min(o.mlp_chunk_tokens, tokens) : tokens;
  const int64_t q = m.q_width ? m.q_width : m.hidden, kv = m.kv_width ? m.kv_width : q;
  const int64_t attention = tokens * (5 * m.hidden + 3 * q + 3 * kv) * elt;
  const int64_t mlp = mlp_tokens * 3 * m.intermediate * elt;
  const int64_t layer = attention + mlp;
  // Backward of one layer: the MLP's three gradients of its width, or attention's dq, dk, dv, and
  // the gradients of the residual stream (two hidden states).
  const int64_t transient = std::max(mlp, tokens * (q + 2 * kv) * elt) + 2 * tokens * m.hidden * elt;
  const int64_t hidden_state = tokens * m.hidden * elt;
  const int64_t loss = std::min(kLossChunkBytes, tokens * m.vocab * 4) + 2 * hidden_state;
  if (!o.gradient_checkpointing) {
    e.activations = m.layers * layer + transient + loss;
  } else {
    // Offloaded, a layer's input stays until the next is offloaded, and backward brings one back
    // ahead of its recompute: about two on the device.
    const int64_t kept = o.offload_activations ? std::min<int64_t>(2, m.layers) : m.layers;
    e.activations = kept * hidden_state + layer + transient + loss;
    if (o.offload_activations) e.host = m.layers * hidden_state;
  }
  const int64_t mlp_part = mlp_tokens * m.intermediate * elt, logits = std::min(kLossChunkBytes, tokens * m.vocab * 4);
  char what[160];
  if (mlp_part >= logits) {
    std::snprintf(what, sizeof what, "the MLP's [%lld, %lld] intermediates", static_cast<long long>(mlp_tokens),
                  static_cast<long long>(m.intermediate));
    e.largest = mlp_part;
  } else {
    std::snprintf(what, sizeof what, "the loss's chunk of logits");
    e.largest = logits;
  }
  e.largest_what = what;
}

double gib_or_mib(int64_t bytes, bool gib) {
  return static_cast<double>(bytes) / (gib ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0);
}

}  // namespace

ModelSizes model_sizes(const std::string& config_json, const std::string& where) {
  const json::Value config = json::parse(config_json);
  TG_CHECK(config.is_object(), "memory estimate", where, " is no JSON object");
  ModelSizes m;
  m.hidden = config_size(config, {"hidden_size", "n_embd"});
  m.layers = config_size(config, {"num_hidden_layers", "n_layer"});
  const int64_t given_inner = config_size(config, {"intermediate_size", "n_inner"});
  m.intermediate = given_inner ? given_inner : 4 * m.hidden;
  m.vocab = config_size(config, {"vocab_size"});
  const int64_t heads = config_size(config, {"num_attention_heads", "n_head"});
  const int64_t head_dim = config_size(config, {"head_dim"});
  const int64_t kv_heads = config_size(config, {"num_key_value_heads"});
  if (heads) {
    const int64_t hd = head_dim ? head_dim : m.hidden / heads;
    m.q_width = heads * hd;
    m.kv_width = (kv_heads ? kv_heads : heads) * hd;
  }
  return m;
}

std::string MemoryEstimate::str() const {
  const bool gib = total() >= (int64_t{1} << 30);
  const char* unit = gib ? "GiB" : "MiB";
  char buf[256];
  std::snprintf(buf, sizeof buf, "~%.1f %s (weights %.1f, trained weights + gradients + AdamW %.1f, activations %.1f",
                gib_or_mib(total(), gib), unit, gib_or_mib(weights, gib), gib_or_mib(training, gib),
                gib_or_mib(activations, gib));
  std::string s = buf;
  if (host > 0) {
    std::snprintf(buf, sizeof buf, "; %.1f %s of offloaded activations in host memory", gib_or_mib(host, gib), unit);
    s += buf;
  }
  if (largest > 0) {
    std::snprintf(buf, sizeof buf, "; the largest intermediate %.1f %s, ", gib_or_mib(largest, gib), unit);
    s += buf + largest_what;
  }
  return s + ")";
}

MemoryEstimate estimate_training_memory(const std::vector<WeightShape>& weights, const ModelSizes& sizes,
                                        const MemoryEstimateOptions& o) {
  MemoryEstimate e;
  const double dtype_bytes = static_cast<double>(element_size(o.dtype));
  int64_t largest_linear = 0;  // a 4-bit layer's weight dequantised into the shared workspace
  for (const WeightShape& t : weights) {
    if (t.name.ends_with("_scales")) continue;  // MXFP4's: they and the _blocks load as the values below
    int64_t n = t.name.ends_with("_blocks") ? 2 : 1;  // MXFP4: two values a byte
    for (int64_t d : t.shape) n *= d;
    const bool linear = t.shape.size() == 2 && t.name.ends_with(".weight") && !is_embedding(t.name);
    // transformers' fused [E, out, in] expert weights (or their MXFP4 blocks): 4-bit with the Linears
    const bool experts = t.shape.size() >= 3 && t.name.find("experts.") != std::string::npos;
    if (linear) largest_linear = std::max(largest_linear, n);
    // NF4: half a byte a value, plus a block's scale (64 values, double quantised: about a byte).
    // FP8: a byte a value (a 128x128 block's float32 scale is 1/4096 byte a value).
    const double bytes = o.load_in_4bit && (linear || experts) ? 0.52
                         : o.load_in_fp8 && linear                 ? 1.0
                                                                   : dtype_bytes;
    e.weights += static_cast<int64_t>(static_cast<double>(n) * bytes);
    if (o.full) {
      e.training += static_cast<int64_t>(static_cast<double>(n) * dtype_bytes) + n * 8;  // gradient, two moments
    } else if (linear && targeted(t.name, o.lora_targets)) {
      e.training += o.lora_r * (t.shape[0] + t.shape[1]) * 4 * 4;  // float32 A, B, their gradients, two moments
    }
  }
  if (o.load_in_4bit) e.weights += static_cast<int64_t>(static_cast<double>(largest_linear) * dtype_bytes);
  plan_activations(sizes, o, e);
  return e;
}

MemoryEstimate estimate_training_memory(const std::string& folder, const MemoryEstimateOptions& o) {
  std::vector<WeightShape> weights;
  for (const safetensors::TensorInfo& t : nn::pretrained_tensors(folder)) weights.push_back({t.name, t.shape});
  const std::string config = (std::filesystem::path(folder) / "config.json").string();
  const std::vector<uint8_t> bytes = io::read_file(config);
  return estimate_training_memory(weights, model_sizes(std::string(bytes.begin(), bytes.end()), config), o);
}

int64_t longest_fitting_seq(const std::vector<WeightShape>& weights, const ModelSizes& sizes,
                            MemoryEstimateOptions options, int64_t budget) {
  auto fits = [&](int64_t seq) {
    options.seq = seq;
    return estimate_training_memory(weights, sizes, options).total() <= budget;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;
  while (hi < (int64_t{1} << 40) && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace tg::train
