#include "nn/models/detail/bnb_4bit.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/shape.h"
#include "ops/nf4_math.h"

namespace tg::nn::bnb {
namespace {

const std::string kWeight = ".weight", kQuantState = ".weight.quant_state.bitsandbytes__";
const char* const kStatePieces[] = {"absmax", "quant_map", "nested_absmax", "nested_quant_map"};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// torch's dtype names as bitsandbytes writes them (str(dtype) without "torch.").
const char* torch_dtype_name(DType t) {
  switch (t) {
    case kFloat32: return "float32";
    case kBFloat16: return "bfloat16";
    default: return dtype_name(t);
  }
}

}  // namespace

json::Value quantization_config_json(const QuantizationConfig& c) {
  json::Value skip = json::Value::array();
  for (const auto& m : c.skip_modules) skip.push_back(m);
  // BitsAndBytesConfig.to_dict(), every field, as transformers writes it (sorted by save_pretrained).
  return json::Value::object()
      .set("_load_in_4bit", true)
      .set("_load_in_8bit", false)
      .set("bnb_4bit_compute_dtype", torch_dtype_name(c.compute_dtype))
      .set("bnb_4bit_quant_storage", "uint8")
      .set("bnb_4bit_quant_type", c.quant_type)
      .set("bnb_4bit_use_double_quant", c.double_quant)
      .set("llm_int8_enable_fp32_cpu_offload", false)
      .set("llm_int8_has_fp16_weight", false)
      .set("llm_int8_skip_modules", c.skip_modules.empty() ? json::Value() : skip)
      .set("llm_int8_threshold", 6.0)
      .set("load_in_4bit", true)
      .set("load_in_8bit", false)
      .set("quant_method", "bitsandbytes");
}

QuantizationConfig parse_quantization_config(const ConfigFields& f, DType model_dtype) {
  const std::string method = f.string("quant_method", "");
  if (method != "bitsandbytes")
    f.unsupported("quant_method", "tapegrad reads bitsandbytes' 4-bit folders; dequantise the model first");
  if (f.boolean("load_in_8bit", false) || f.boolean("_load_in_8bit", false))
    f.unsupported(f.get("load_in_8bit") ? "load_in_8bit" : "_load_in_8bit",
                  "LLM.int8() weights are not implemented; 4-bit (load_in_4bit) are");
  if (!f.boolean("load_in_4bit", f.boolean("_load_in_4bit", false)))
    f.unsupported("load_in_4bit", "a bitsandbytes folder tapegrad reads has load_in_4bit true");
  QuantizationConfig c{.load_in_4bit = true};
  c.quant_type = f.string("bnb_4bit_quant_type", "fp4");  // transformers' defaults where absent
  if (c.quant_type != "nf4" && c.quant_type != "fp4") f.unsupported("bnb_4bit_quant_type", "nf4 or fp4");
  c.double_quant = f.boolean("bnb_4bit_use_double_quant", false);
  const std::string compute = f.string("bnb_4bit_compute_dtype", "float32");
  if (compute == "float32") c.compute_dtype = kFloat32;
  else if (compute == "bfloat16") c.compute_dtype = kBFloat16;
  else if (compute == "float16") c.compute_dtype = model_dtype == kBFloat16 ? kBFloat16 : kFloat32;
  else f.unsupported("bnb_4bit_compute_dtype", "float32, bfloat16 or float16");
  if (f.string("bnb_4bit_quant_storage", "uint8") != "uint8")
    f.unsupported("bnb_4bit_quant_storage", "the packed weights stored as uint8, bitsandbytes' default");
  if (const json::Value* skip = f.get("llm_int8_skip_modules")) {
    if (!skip->is_array()) f.bad("llm_int8_skip_modules", "a list of module names or null");
    c.skip_modules.clear();
    for (const json::Value& m : skip->as_array()) {
      if (!m.is_string()) f.bad("llm_int8_skip_modules", "a list of module names or null");
      c.skip_modules.push_back(m.as_string());
    }
  }
  return c;
}

std::string weight_of_quant_state_key(const std::string& key) {
  const size_t at = key.rfind(kQuantState);
  if (at == std::string::npos || at == 0) return "";
  const std::string type = key.substr(at + kQuantState.size());
  return type == "nf4" || type == "fp4" ? key.substr(0, at + kWeight.size()) : "";
}

std::string tapegrad_name(const std::string& key) {
  for (const char* piece : kStatePieces) {
    const std::string suffix = kWeight + "." + piece;
    if (key.size() > suffix.size() && key.ends_with(suffix))
      return key.substr(0, key.size() - suffix.size()) + "." + piece;
  }
  return key;
}

std::map<std::string, Tensor> state_tensors(const QuantState4bit& q, const std::string& layer) {
  const std::string w = layer + kWeight;
  std::map<std::string, Tensor> out;
  const int64_t bytes = q.packed.numel();
  out[w] = q.packed.as_strided({bytes, 1}, {1, 1}, q.packed.storage_offset());
  out[w + ".absmax"] = q.absmax;
  out[w + ".quant_map"] = q.quant_map;
  json::Value shape = json::Value::array();
  for (int64_t d : q.shape) shape.push_back(d);
  json::Value fields = json::Value::object()
                           .set("quant_type", q.quant_type)
                           .set("blocksize", q.blocksize)
                           .set("dtype", torch_dtype_name(q.dtype))
                           .set("shape", shape);
  if (q.nested()) {
    out[w + ".nested_absmax"] = q.nested_absmax;
    out[w + ".nested_quant_map"] = q.nested_quant_map;
    fields.set("nested_blocksize", nf4::kNestedBlocksize).set("nested_dtype", "float32")
        .set("nested_offset", static_cast<double>(q.offset));
  }
  const std::string text = json::dump(fields);
  Tensor json_bytes = Tensor::empty({static_cast<int64_t>(text.size())}, {kUInt8});
  std::memcpy(json_bytes.data_ptr(), text.data(), text.size());
  out[w + ".quant_state.bitsandbytes__" + q.quant_type] = json_bytes;
  return out;
}

QuantStateFields parse_quant_state(const Tensor& bytes, const std::string& key) {
  const char* op = "from_pretrained";
  TG_CHECK(bytes.dtype() == kUInt8 && bytes.dim() == 1, op, "'", key, "' is ", bytes.dtype(), " ", bytes.shape(),
           ", wants bitsandbytes' quant_state: the bytes of a JSON text (U8 [n])");
  const std::vector<uint8_t> raw = bytes.to_vector<uint8_t>();
  json::Value v;
  try {
    v = json::parse(std::string_view(reinterpret_cast<const char*>(raw.data()), raw.size()));
  } catch (const Error& e) {
    fail(op, "'", key, "' is not bitsandbytes' quant_state JSON: ", e.what());
  }
  const ConfigFields f(std::move(v), key);
  TG_CHECK(f.json().is_object(), op, "'", key, "' is not a JSON object");
  for (const char* field : {"quant_type", "blocksize", "dtype", "shape"})
    TG_CHECK(f.get(field), op, "'", key, "' has no ", field, " (bitsandbytes' quant_state JSON has quant_type, "
             "blocksize, dtype and shape)");
  QuantStateFields q;
  q.quant_type = f.string("quant_type", "");
  const std::string named = key.substr(key.rfind("__") + 2);
  if (q.quant_type != named)
    f.bad("quant_type", "\"" + named + "\", the quant_type its key names (bitsandbytes__" + named + ")");
  q.blocksize = f.integer("blocksize", 0);
  bool valid = false;
  for (int64_t b : {32, 64, 128, 256, 512, 1024, 2048, 4096}) valid = valid || q.blocksize == b;
  if (!valid) f.bad("blocksize", "one of 32, 64, ..., 4096");
  const std::string dtype = f.string("dtype", "");
  if (dtype == "bfloat16") q.dtype = kBFloat16;
  else if (dtype == "float32" || dtype == "float16") q.dtype = kFloat32;  // float16 widened, as F16 tensors are
  else f.bad("dtype", "\"bfloat16\", \"float16\" or \"float32\"");
  const json::Value* shape = f.get("shape");
  if (!shape->is_array() || shape->size() != 2) f.bad("shape", "[out_features, in_features]");
  for (const json::Value& d : shape->as_array()) {
    if (!d.is_int() || d.as_int() < 1 || d.as_int() > ConfigFields::kMaxSize)
      f.bad("shape", "[out_features, in_features], positive integers");
    q.shape.push_back(d.as_int());
  }
  q.nested = f.get("nested_offset") || f.get("nested_blocksize");
  if (q.nested) {
    TG_CHECK(f.get("nested_offset") && f.get("nested_blocksize"), op, "'", key,
             "' has one of nested_offset and nested_blocksize without the other");
    if (f.integer("nested_blocksize", 0) != nf4::kNestedBlocksize) f.bad("nested_blocksize", "256");
    if (f.string("nested_dtype", "float32") != "float32") f.bad("nested_dtype", "\"float32\"");
    q.offset = static_cast<float>(f.number("nested_offset", 0, -HUGE_VAL, HUGE_VAL));
  }
  return q;
}

QuantState4bit empty_quant_state(const QuantStateFields& f, Device device) {
  QuantState4bit q;
  q.shape = f.shape;
  q.dtype = f.dtype;
  q.quant_type = f.quant_type;
  q.blocksize = f.blocksize;
  q.offset = f.offset;
  const int64_t n = numel_of(f.shape), blocks = ceil_div(n, f.blocksize);
  q.packed = Tensor::empty({(n + 1) / 2}, {kUInt8, device});
  q.absmax = Tensor::empty({blocks}, {f.nested ? kUInt8 : kFloat32, device});
  q.quant_map = Tensor::empty({16}, {kFloat32, device});
  if (f.nested) {
    q.nested_absmax = Tensor::empty({ceil_div(blocks, nf4::kNestedBlocksize)}, {kFloat32, device});
    q.nested_quant_map = Tensor::empty({256}, {kFloat32, device});
  }
  return q;
}

std::string state_piece(const std::string& name) {
  for (const char* piece : kStatePieces)
    if (name.ends_with(std::string(".") + piece)) return piece;
  return "";
}

void check_state_piece(const Tensor& t, const std::string& piece, const std::string& quant_type,
                       const std::string& key, const std::string& file) {
  if (t.dtype() != kFloat32) return;  // absmax as the codes of double quantisation: any byte is one
  const std::vector<float> v = t.to_vector<float>();
  auto where = [&] { return "'" + file + "': '" + key + "'"; };
  if (piece == "absmax" || piece == "nested_absmax") {
    for (size_t i = 0; i < v.size(); ++i)
      TG_CHECK(std::isfinite(v[i]) && v[i] >= 0, "from_pretrained", where(), " holds ", v[i], " at block ", i,
               ": a block's absmax is a finite number >= 0 (its largest |weight|)");
    return;
  }
  const bool nested = piece == "nested_quant_map";
  const float* code = nested ? dynamic_map_8bit().data() : quant_type == "fp4" ? nf4::kFP4Map : nf4::kNF4Map;
  for (size_t i = 0; i < v.size(); ++i)  // a few float32 ulps: the maps are computed in float32
    TG_CHECK(std::abs(v[i] - code[i]) <= 1e-6f * std::abs(code[i]), "from_pretrained", where(), " holds ", v[i],
             " at ", i, ", where bitsandbytes' ", nested ? "8-bit dynamic map" : quant_type + " code", " has ", code[i],
             ": the weights would dequantise to other values");
}

bool skipped_module(const QuantizationConfig& config, const std::string& path) {
  for (std::string n : config.skip_modules) {
    if (path.ends_with(n)) return true;
    while (!n.empty() && (n.back() == '*' || n.back() == '.')) n.pop_back();  // "model.layers.0.*": the subtree
    if (!n.empty() && (path == n || path.starts_with(n + "."))) return true;
  }
  return false;
}

}  // namespace tg::nn::bnb
