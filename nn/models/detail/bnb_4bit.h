// How transformers + bitsandbytes store a 4-bit model in a folder: config.json's
// "quantization_config" (BitsAndBytesConfig.to_dict()), and per quantised Linear the tensors of
// QuantState.as_dict(packed=True): <layer>.weight (U8 [(n + 1) / 2, 1], the packed codes),
// .weight.absmax (F32 [blocks], or U8 double-quantised), .weight.quant_map (F32 [16]), with double
// quantisation .weight.nested_absmax (F32 [ceil(blocks / 256)]) and .weight.nested_quant_map (F32
// [256]), and .weight.quant_state.bitsandbytes__nf4 (or __fp4): U8, the UTF-8 JSON of quant_type,
// blocksize, dtype, shape (and nested_blocksize, nested_dtype, nested_offset). nn::Linear4bit names
// them "weight", "absmax", ... (a module's names have no dots): the keys are mapped both ways.
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"
#include "io/json.h"
#include "nn/models/config_fields.h"
#include "nn/models/quantization.h"
#include "ops/nf4.h"

namespace tg::nn::bnb {

// config.json's quantization_config as transformers writes it for `config`: quant_method
// "bitsandbytes", load_in_4bit, bnb_4bit_quant_type, bnb_4bit_use_double_quant,
// bnb_4bit_compute_dtype, bnb_4bit_quant_storage "uint8", llm_int8_skip_modules, ...
json::Value quantization_config_json(const QuantizationConfig& config);
// The QuantizationConfig of a quantization_config object `f` (its source names the file).
// tg::Error naming the field for anything but bitsandbytes 4-bit weights stored as uint8.
// bnb_4bit_compute_dtype float16 (tapegrad has no float16) computes in `model_dtype`.
QuantizationConfig parse_quantization_config(const ConfigFields& f, DType model_dtype);

// The non-tensor part of a QuantState (its JSON).
struct QuantStateFields {
  std::string quant_type;
  int64_t blocksize = 64;
  DType dtype = kFloat32;  // the weight's dtype before quantisation (float16 reads as float32)
  Shape shape;
  bool nested = false;
  float offset = 0.0f;
};

// "<layer>.weight.quant_state.bitsandbytes__<type>" -> "<layer>.weight", else "".
std::string weight_of_quant_state_key(const std::string& key);
// A file key of a state tensor ("<layer>.weight.absmax", ...) -> its name in tapegrad
// ("<layer>.absmax"); any other key as it is.
std::string tapegrad_name(const std::string& key);

// The tensors above for weight `q` of the layer at `layer` (packed as [(n + 1) / 2, 1]).
std::map<std::string, Tensor> state_tensors(const QuantState4bit& q, const std::string& layer);
// The fields of a quant_state tensor (the file's `key`), checked: tg::Error naming the key for
// text that is not that JSON, a quant_type that disagrees with the key's suffix, a blocksize
// bitsandbytes does not make, a shape that is not 2-D, nested fields other than bitsandbytes'.
QuantStateFields parse_quant_state(const Tensor& json_bytes, const std::string& key);
// A state of `fields`' sizes on `device`, its tensors allocated and uninitialised (the folder's
// tensors are read into them).
QuantState4bit empty_quant_state(const QuantStateFields& fields, Device device);

// The piece of a state ("absmax", "quant_map", "nested_absmax", "nested_quant_map") a tapegrad
// name ends with ("<layer>.absmax"), else "".
std::string state_piece(const std::string& name);
// tg::Error naming `key` of `file` when `piece`, read into `t`, holds what bitsandbytes never
// writes and the dequantised weights would silently take: an absmax or nested_absmax that is
// NaN, infinite or negative, a quant_map other than the code of `quant_type` (get_4bit_type), a
// nested_quant_map other than the 8-bit dynamic map (within float32 rounding: torch's linspace
// rounds it per CPU). absmax as uint8 codes (double quantisation) is any byte. Reads t on the host.
void check_state_piece(const Tensor& t, const std::string& piece, const std::string& quant_type,
                       const std::string& key, const std::string& file);
// Whether quantization_config's llm_int8_skip_modules leaves the Linear at `path` dense, as
// transformers reads it: an entry is the module's path, a suffix of it ("lm_head", "o_proj") or a
// prefix of it ("model.layers.0", "model.layers.0.*").
bool skipped_module(const QuantizationConfig& config, const std::string& path);

}  // namespace tg::nn::bnb
