// The sparse mixture-of-experts block of Qwen3-MoE, Mixtral and gpt-oss (transformers 5's
// Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock, GptOssMLP): a router gives each token a logit per
// expert, the family's routing picks top_k experts and their weights, the experts (SwiGLU MLPs
// held as transformers 5 holds them, fused 3-D parameters) run on their tokens only (grouped_mm),
// and each token's output is the weighted sum of its experts' outputs. No token is dropped.
// Parameter names are transformers': mlp.gate.weight (mlp.router.weight / .bias for gpt-oss),
// mlp.experts.gate_up_proj, mlp.experts.down_proj (and gpt-oss's .gate_up_proj_bias, .down_proj_bias).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/generator.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "ops/nf4.h"

namespace tg::nn {

struct MoeOptions {
  enum class Routing {
    SoftmaxTopK,  // Qwen3-MoE, Mixtral: softmax over every expert in float32, top_k of it (renormalised by
                  // norm_topk_prob)
    TopKSoftmax,  // gpt-oss: top_k of the logits, softmax over those
  };
  enum class Experts {
    // gate_up_proj [E, 2I, H] (gate rows, then up rows), down_proj [E, H, I]: silu(gate) * up.
    SwiGLU,
    // gpt-oss: gate_up_proj [E, H, 2I] (gate and up columns interleaved), down_proj [E, I, H], a
    // bias on both: (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit).
    ClampedSwiGLU,
  };
  int64_t num_experts = 0, top_k = 0, intermediate_size = 0;
  Routing routing = Routing::SoftmaxTopK;
  bool norm_topk_prob = true;  // SoftmaxTopK: the top_k weights divided by their sum (Mixtral always)
  Experts experts = Experts::SwiGLU;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;  // ClampedSwiGLU
  std::string router = "gate";  // the router's module name: "gate", or "router" with a bias (gpt-oss)

  bool router_bias() const { return router == "router"; }
  void validate(int64_t hidden) const;  // tg::Error naming the bad field
};

// QLoRA's frozen experts: one weight of a MoeExperts in 4 bits, each expert's [out, in] quantised
// on its own (ops/nf4.h) so that grouped_mm_4bit dequantises one expert at a time. The pieces are
// buffers ("weight_3", "absmax_3", ...): to(device) moves them, to(dtype) keeps them; none is
// saved (a 4-bit base is re-made from its folder).
class Experts4bit : public Module {
 public:
  explicit Experts4bit(std::vector<QuantState4bit> experts);
  // w [E, out, in]'s experts quantised one by one (quantize_4bit's arguments); tg::Error naming
  // the expert for NaN or inf.
  static std::shared_ptr<Experts4bit> quantize(const Tensor& w, const std::string& quant_type, bool double_quant,
                                               int64_t blocksize);
  // Every expert dequantised, [E, out, in] in the dtype they had before quantisation.
  Tensor dequantized() const;

  std::vector<QuantState4bit> experts;

 protected:
  std::string extra_repr() const override;
};

// The experts' parameters and their computation on tokens grouped by expert.
class MoeExperts : public Module {
 public:
  MoeExperts(int64_t hidden, const MoeOptions& options);
  using Module::forward;  // not hidden by the grouped forward below (clang's -Woverloaded-virtual)
  // x [n, hidden], rows grouped by expert, counts[e] rows of expert e -> [n, hidden].
  Tensor forward(const Tensor& x, const std::vector<int64_t>& counts);
  // A low-rank update of gate_up_proj or down_proj as grouped_mm takes it: W_e + scaling B_e A_e,
  // A [E, r, in], B [E, out, r] (peft's target_parameters; peft::LoRAExperts gives one).
  struct Update {
    Tensor lora_A, lora_B;
    double scaling = 1.0;
  };
  virtual std::optional<Update> update(const std::string& parameter) const;
  // The parameter as [E, out, in] (a transposed view of gpt-oss's [E, in, out]; dequantised when
  // it is held in 4 bits).
  Tensor weight(const std::string& parameter) const;
  Shape weight_shape(const std::string& parameter) const;  // weight(parameter)'s, without dequantising
  DType weight_dtype() const;                              // the experts' weights', quantised or not
  Device weight_device() const;
  // QLoRA's frozen base: `parameter`'s experts quantised one by one (Experts4bit::quantize), the
  // dense tensor dropped; forward then runs grouped_mm_4bit. On an error nothing changes.
  void quantize_4bit(const std::string& parameter, const std::string& quant_type = "nf4", bool double_quant = true,
                     int64_t blocksize = 64);
  // The same with the experts quantised already (of weight_shape(parameter)).
  void install_4bit(const std::string& parameter, std::shared_ptr<Experts4bit> experts);
  bool quantized() const { return gate_up_proj_4bit || down_proj_4bit; }
  // Every 4-bit weight dense again (frozen, in its layout and former dtype): merge_and_unload's.
  void dequantize();
  // transformers' _init_weights: the weights ~ N(0, std), the biases zero.
  void init(double std, Generator& gen);
  // A block taking over another's tensors (the same handles, their requires_grad kept): what
  // peft::LoRAExperts builds on, and what merge_and_unload leaves.
  MoeExperts(const std::string& type_name, const MoeExperts& base);

  MoeOptions options;
  int64_t hidden;
  Tensor gate_up_proj, down_proj;            // see MoeOptions::Experts
  Tensor gate_up_proj_bias, down_proj_bias;  // ClampedSwiGLU: [E, 2I], [E, H]
  // QLoRA: the weight in 4 bits (submodules of these names), the dense one then undefined.
  std::shared_ptr<Experts4bit> gate_up_proj_4bit, down_proj_4bit;

 protected:
  std::string extra_repr() const override;

 private:
  void register_tensors(bool fresh);  // fresh: trainable; else the taken-over tensors' flags
};

// What the load-balancing loss (below) needs of a block's last forward.
struct RouterStats {
  Tensor probability_sum;       // [E] float32: the sum over tokens of softmax(router logits), differentiable
  std::vector<int64_t> counts;  // the top_k choices of each expert
  int64_t tokens = 0;
};

class SparseMoeBlock : public Module {
 public:
  SparseMoeBlock(int64_t hidden, const MoeOptions& options, Generator& gen = default_generator());
  // x [..., hidden] -> [..., hidden]. With keep_router_stats, `stats` holds this forward's.
  Tensor forward(const Tensor& x) override;

  MoeOptions options;
  bool keep_router_stats = false;
  RouterStats stats;
  std::shared_ptr<Linear> router;  // registered as options.router: [E, hidden] (+ bias)
  std::shared_ptr<MoeExperts> experts;
};

// transformers' load_balancing_loss_func (the Switch Transformer's auxiliary loss) over the layers'
// stats as one batch of tokens: num_experts * sum_e (choices of e / tokens) * (mean probability of
// e), differentiable through the probabilities. tg::Error when a layer has no stats.
Tensor load_balancing_loss(const std::vector<const RouterStats*>& layers, int64_t num_experts);

}  // namespace tg::nn
