// Turning a model's frozen Linear layers into 4-bit ones (QLoRA), as transformers does for
// from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)):
//
//   tg::nn::QuantizationConfig q{.load_in_4bit = true, .quant_type = "nf4", .double_quant = true,
//                                .compute_dtype = tg::kBFloat16};
//   model->to(tg::kBFloat16, device);
//   tg::nn::replace_with_4bit_linear(*model, q);   // every Linear but lm_head, in place
//   tg::peft::apply_lora(*model, lora_config);      // LoRA wraps the 4-bit layers
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "nn/module.h"
#include "ops/fp8.h"
#include "ops/nf4.h"

namespace tg::nn {

// transformers' BitsAndBytesConfig, 4-bit fields (load_in_4bit, bnb_4bit_quant_type,
// bnb_4bit_use_double_quant, bnb_4bit_compute_dtype, llm_int8_skip_modules). The defaults are
// QLoRA's (NF4, double quantisation, bfloat16 compute), not transformers' (fp4, none, float32).
// Or load_in_fp8: the Linear weights in FP8 (e4m3, ops/fp8.h) with 128x128 block scales (the FP8
// checkpoints' layout) or one scale a row, computing in compute_dtype (nn::LinearFp8).
struct QuantizationConfig {
  bool load_in_4bit = false;
  bool load_in_fp8 = false;
  Fp8Scaling fp8_scaling = Fp8Scaling::Block128;
  std::string quant_type = "nf4";  // "nf4" or "fp4"
  bool double_quant = true;
  DType compute_dtype = kBFloat16;  // float32 or bfloat16
  // Modules (matched as peft matches: the path or its last components) left unquantised.
  std::vector<std::string> skip_modules = {"lm_head"};
  int64_t blocksize = 64;

  // tg::Error naming `op` when neither or both of load_in_4bit and load_in_fp8 are set, or a field
  // has a value bitsandbytes lacks.
  void validate(const char* op) const;
};

// Replaces every nn::Linear of `model` (exactly that type) not matched by skip_modules by an
// nn::Linear4bit holding its quantised weight and its bias (frozen), sharing one workspace per
// device of the largest layer's size, and holds a mixture's expert weights in 4 bits
// (nn::MoeExperts::install_4bit). Returns the paths replaced, then the expert weights quantised
// ("...mlp.experts.gate_up_proj"). tg::Error when load_in_4bit is false, the config is invalid, a
// Linear or experts block already carries LoRA (quantise before apply_lora) or is already
// quantised; nothing changes then.
std::vector<std::string> replace_with_4bit_linear(Module& model, const QuantizationConfig& config);

// The expert weights ("<experts block>.gate_up_proj", ".down_proj") a load_in_4bit config puts in
// 4 bits: every nn::MoeExperts not matched by skip_modules. tg::Error as linear_4bit_targets.
std::vector<std::string> experts_4bit_targets(Module& model, const QuantizationConfig& config, const char* op);

// The paths replace_with_4bit_linear (replace_with_fp8_linear) replaces, checked as it checks them
// (errors name `op`).
std::vector<std::string> linear_4bit_targets(Module& model, const QuantizationConfig& config, const char* op);
// Replaces the Linear at `path` by an nn::Linear4bit of `weight` (its quantised weight), its bias
// frozen, computing in compute_dtype with `workspace` (at least the weight's elements).
void install_linear_4bit(Module& model, const std::string& path, QuantState4bit weight, DType compute_dtype,
                         const Tensor& workspace);

// As replace_with_4bit_linear for load_in_fp8: every targeted Linear becomes an nn::LinearFp8 of its
// weight quantised by quantize_fp8 (config.fp8_scaling). Returns the paths replaced.
std::vector<std::string> replace_with_fp8_linear(Module& model, const QuantizationConfig& config);
// Replaces the Linear at `path` by an nn::LinearFp8 of `weight`, its bias frozen.
void install_linear_fp8(Module& model, const std::string& path, Fp8Weight weight, DType compute_dtype);

}  // namespace tg::nn
