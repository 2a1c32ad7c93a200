#include "nn/models/pretrained.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/memory.h"
#include "core/primitives.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/init.h"
#include "nn/linear4bit.h"
#include "nn/linear_fp8.h"
#include "nn/models/config_fields.h"
#include "nn/models/detail/bnb_4bit.h"
#include "nn/models/detail/fp8_checkpoint.h"
#include "nn/models/detail/checkpoint_layout.h"
#include "nn/models/detail/mxfp4.h"
#include "nn/models/quantization.h"
#include "nn/moe.h"
#include "ops/shape.h"

namespace tg::nn {
namespace {

namespace fs = std::filesystem;
const std::string kConfig = "config.json", kWeights = "model.safetensors", kIndex = "model.safetensors.index.json";
const std::string kHead = "lm_head.weight";

using Fields = ConfigFields;

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
  return parse_fields(dir.read(kConfig, io::kMaxConfigBytes), dir.path_of(kConfig));
}

// The registry entry config.json names (its architectures entry, else its model_type).
const Architecture& architecture(const Fields& f) {
  std::string name;
  if (const json::Value* a = f.get("architectures")) {
    if (!a->is_array() || a->size() != 1 || !a->as_array()[0].is_string())
      f.unsupported("architectures", "wants one name: " + architecture_names());
    name = a->as_array()[0].as_string();
  }
  const std::string type = f.string("model_type", "");
  TG_CHECK(!name.empty() || !type.empty(), "from_pretrained", "'", f.source(),
           "' names neither architectures nor model_type");
  for (const Architecture* arch : architectures()) {
    if (name.empty() ? type != arch->model_type : name != arch->name) continue;
    if (!type.empty() && type != arch->model_type)
      f.unsupported("model_type", arch->name + " wants model_type \"" + arch->model_type + "\"");
    return *arch;
  }
  std::string types;
  for (const Architecture* arch : architectures()) types += (types.empty() ? "" : ", ") + arch->model_type;
  if (!name.empty()) f.unsupported("architectures", "supported: " + architecture_names());
  f.unsupported("model_type", "supported: " + types);
}

bool is_conv1d_weight(const Module& model, const std::string& name) {
  const std::string suffix = ".weight";
  return name.ends_with(suffix) && is_hf_conv1d(model, name.substr(0, name.size() - suffix.size()));
}

// "lm_head.weight" when it is the embedding's tensor (transformers then writes only the
// embedding and ignores a saved head), else "".
std::string tied_head(const StateDict& own, const Architecture& arch) {
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
  std::vector<uint8_t> bytes = dir.read(kIndex, io::kMaxConfigBytes);
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

// A progress line on stderr while a large folder loads: bytes read of the total, and the rate.
class Progress {
 public:
  Progress(const std::string& dir, uint64_t total, bool show) : dir_(dir), total_(total), show_(show) {}
  ~Progress() {
    if (printed_) std::fputc('\n', stderr);
  }
  void add(size_t n) {
    done_ += n;
    if (!show_) return;
    const auto now = std::chrono::steady_clock::now();
    if (printed_ && done_ < total_ && now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    printed_ = true;
    const double s = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\rfrom_pretrained: '%s' %.2f / %.2f GB, %.0f MB/s ", dir_.c_str(), done_ / 1e9, total_ / 1e9,
                 s > 0 ? done_ / 1e6 / s : 0.0);
    std::fflush(stderr);
  }

 private:
  std::string dir_;
  uint64_t total_, done_ = 0;
  bool show_, printed_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};

// Folders above this many bytes of weights get a progress line (on a terminal, unless quiet).
constexpr uint64_t kProgressBytes = 1'000'000'000;

// The 4-bit side of a load: none, every target Linear quantised as its weight streams in, or the
// layers the folder holds in bitsandbytes' layout read as they are.
struct FourBit {
  bool on = false;
  bool prequantized = false;
  QuantizationConfig config;  // the format, and the compute dtype of the Linear4bit layers
  bool mxfp4 = false;  // gpt-oss's expert weights as MXFP4 blocks and scales, dequantised as they stream
  bool fp8 = false;    // prequantized: an FP8 checkpoint (nn/models/detail/fp8_checkpoint.h), not bitsandbytes'
};

FourBit four_bit(const Fields& f, const PretrainedOptions& o) {
  FourBit four;
  const QuantizationConfig& asked = o.quantization;
  if (asked.load_in_4bit || asked.load_in_fp8) {
    asked.validate("from_pretrained");
    TG_CHECK(*o.dtype == kFloat32 || *o.dtype == kBFloat16, "from_pretrained", "quantising to ",
             asked.load_in_fp8 ? "FP8" : "4 bits", " wants the weights as float32 or bfloat16 first (options.dtype), "
             "got ", *o.dtype);
  }
  const json::Value* q = f.get("quantization_config");
  const json::Value* method = q && q->is_object() ? q->find("quant_method") : nullptr;
  four.mxfp4 = method && method->is_string() && method->as_string() == "mxfp4";  // the family's parse accepted it
  if (q && !four.mxfp4) {
    four.prequantized = four.on = true;
    four.fp8 = method && method->is_string() && method->as_string() == "fp8";
    const Fields fields(*q, f.source() + " quantization_config");
    TG_CHECK(!(four.fp8 ? asked.load_in_4bit : asked.load_in_fp8), "from_pretrained", "'", f.source(), "' holds ",
             four.fp8 ? "FP8" : "4-bit", " weights (its quantization_config), which load as they are: drop ",
             four.fp8 ? "load_in_4bit" : "load_in_fp8");
    four.config = four.fp8 ? fp8_checkpoint::parse_quantization_config(fields, *o.dtype)
                           : bnb::parse_quantization_config(fields, *o.dtype);
    if (asked.load_in_4bit || asked.load_in_fp8) four.config.compute_dtype = asked.compute_dtype;  // the folder keeps its format
  } else if (asked.load_in_4bit || asked.load_in_fp8) {
    four.on = true;
    four.config = asked;
  }
  return four;
}

// A read of one file tensor: into a tensor, or (layer set) into the staging buffer and quantised
// into the nn::Linear4bit that replaces that layer.
struct Read {
  const safetensors::TensorInfo* tensor;
  Tensor into;
  std::string layer;
  bool conv1d = false;
  bool whole = false;  // `into` is the parameter itself, not a view of it (its storage may be swapped)
  std::string piece;   // a 4-bit state's absmax, quant_map, ...: its values are checked once read
  std::string mxfp4;  // the expert weight an MXFP4 _blocks / _scales tensor dequantises into
  std::string experts;  // an expert weight quantised once whole: allocated at its first read
  std::optional<detail::CheckpointPart> part;  // ... and the part this read fills (`into` is made then)
};

// The MXFP4 halves of an expert weight: "_blocks" or "_scales" (7 characters either).
bool is_mxfp4_half(const std::string& key) { return key.ends_with("_blocks") || key.ends_with("_scales"); }
struct WeightFile {
  std::unique_ptr<safetensors::FileReader> reader;
  std::vector<Read> reads;
};

// The layer path of a ".weight" name.
std::string layer_of(const std::string& weight_name) { return weight_name.substr(0, weight_name.rfind('.')); }

// The model's name of a file key ("lm_head.weight", or "h.0.attn.c_attn.weight" under the base prefix).
std::string own_name(const StateDict& own, const std::string& key, const std::string& tied, const Architecture& arch) {
  return own.count(key) || key == tied ? key : arch.base_prefix + key;
}

// Prequantised folder: an empty nn::Linear4bit (its state sized by the quant_state JSON, filled by
// the reads that follow) in place of every layer the files hold in 4 bits. Returns the state's names.
std::set<std::string> install_4bit_shells(Module& model, const Architecture& arch, std::vector<WeightFile>& files,
                                          const FourBit& four, const PretrainedOptions& o,
                                          std::set<std::string>& consumed, std::vector<std::string>& unexpected) {
  const StateDict own = model.state_dict();
  std::map<std::string, QuantState4bit> shells;
  for (WeightFile& f : files)
    for (const safetensors::TensorInfo& t : f.reader->header().tensors) {
      const std::string weight_key = bnb::weight_of_quant_state_key(t.name);
      if (weight_key.empty()) continue;
      consumed.insert(t.name);
      const std::string weight = own_name(own, weight_key, "", arch);
      auto it = own.find(weight);
      if (it == own.end() || !init::is_unallocated(it->second)) {
        unexpected.push_back(t.name + " (no Linear '" + layer_of(weight) + "' to quantise)");
        continue;
      }
      TG_CHECK(t.dtype == kUInt8, "from_pretrained", "'", f.reader->path(), "': '", t.name, "' is ", t.code,
               ", wants U8 (bitsandbytes' quant_state: the bytes of a JSON text)");
      Tensor bytes = Tensor::empty(t.shape, {kUInt8});
      f.reader->read(t, bytes);
      const bnb::QuantStateFields fields = bnb::parse_quant_state(bytes, t.name);
      TG_CHECK(fields.shape == it->second.shape(), "from_pretrained", "'", t.name, "' says shape ", fields.shape,
               ", but '", weight, "' of the config.json's model is ", it->second.shape());
      TG_CHECK(fields.quant_type == four.config.quant_type && fields.nested == four.config.double_quant,
               "from_pretrained", "'", t.name, "' is ", fields.quant_type, fields.nested ? " double-quantised" : "",
               ", but config.json's quantization_config says ", four.config.quant_type,
               four.config.double_quant ? " double-quantised" : "", " (bnb_4bit_quant_type, bnb_4bit_use_double_quant)");
      shells[layer_of(weight)] = bnb::empty_quant_state(fields, o.device);
    }
  int64_t largest = 0;
  for (const auto& [layer, q] : shells) largest = std::max(largest, q.numel());
  const Tensor workspace = largest ? Tensor::empty({largest}, {four.config.compute_dtype, o.device}) : Tensor();
  std::set<std::string> names;
  for (auto& [layer, q] : shells) {
    install_linear_4bit(model, layer, std::move(q), four.config.compute_dtype, workspace);
    for (const char* piece : {"weight", "absmax", "quant_map", "nested_absmax", "nested_quant_map"})
      names.insert(layer + "." + piece);
  }
  return names;
}

// FP8 checkpoint: an empty nn::LinearFp8 (filled by the reads that follow) in place of every layer
// whose weight the files hold with a weight_scale_inv, each pair's dtypes and shapes checked first
// (then read as they are stored: the e4m3 bytes into the uint8 weight).
void install_fp8_shells(Module& model, const Architecture& arch, std::vector<WeightFile>& files,
                                         const FourBit& four, const PretrainedOptions& o,
                                         std::vector<std::string>& unexpected) {
  const StateDict own = model.state_dict();
  std::map<std::string, std::pair<const safetensors::TensorInfo*, std::string>> by_key;  // the info and its file
  for (WeightFile& f : files)
    for (const safetensors::TensorInfo& t : f.reader->header().tensors) by_key[t.name] = {&t, f.reader->path()};
  for (const auto& [key, entry] : by_key) {
    if (!key.ends_with(fp8_checkpoint::kScaleSuffix)) continue;
    const std::string weight_key = key.substr(0, key.size() - std::string("_scale_inv").size());
    const std::string weight = own_name(own, weight_key, "", arch);
    auto it = own.find(weight);
    if (it == own.end() || !init::is_unallocated(it->second)) {
      unexpected.push_back(key + " (no Linear '" + layer_of(weight) + "' to hold in FP8)");
      continue;
    }
    auto w = by_key.find(weight_key);
    TG_CHECK(w != by_key.end(), "from_pretrained", "'", entry.second, "' holds '", key, "' but no file holds '",
             weight_key, "'");
    const Shape& shape = it->second.shape();
    fp8_checkpoint::check_layer(w->second.second, weight_key, w->second.first->code, w->second.first->shape,
                                entry.first->code, entry.first->shape, shape);
    Fp8Weight shell{Tensor::empty(shape, {kUInt8, o.device}), Tensor::empty(entry.first->shape, {kFloat32, o.device}),
                    Fp8Scaling::Block128};
    install_linear_fp8(model, layer_of(weight), std::move(shell), four.config.compute_dtype);
  }
}

// What config.json's quantization_config says against what the files hold, before anything is
// read: bitsandbytes' 4-bit state without a quantization_config, and with one, a Linear the files
// hold dense that its llm_int8_skip_modules does not leave dense (a dense folder under a stray
// quantization_config would load as a dense model without a word). The head stays dense, as
// transformers keeps the output embedding.
void check_4bit_layout(Module& model, const Architecture& arch, const std::vector<WeightFile>& files,
                       const FourBit& four, const io::Folder& dir) {
  std::map<std::string, std::string> file_of;  // file key -> the file holding it
  for (const WeightFile& f : files)
    for (const safetensors::TensorInfo& t : f.reader->header().tensors) {
      file_of[t.name] = f.reader->path();
      TG_CHECK(four.prequantized || bnb::weight_of_quant_state_key(t.name).empty(), "from_pretrained", "'",
               f.reader->path(), "' holds '", t.name, "', bitsandbytes' 4-bit state, but ", dir.path_of(kConfig),
               " has no quantization_config: a 4-bit folder's config.json says how its weights are stored");
    }
  if (!four.prequantized) return;
  std::vector<std::string> dense;
  for (auto& [path, m] : model.named_modules()) {
    auto* linear = dynamic_cast<Linear*>(m);
    if (!linear || typeid(*linear) != typeid(Linear) || path.empty() || path == layer_of(kHead) ||
        bnb::skipped_module(four.config, path))
      continue;
    const std::string weight = path + ".weight";  // the file's key, with or without the base prefix
    const std::string key = file_of.count(weight) || !weight.starts_with(arch.base_prefix)
                                ? weight : weight.substr(arch.base_prefix.size());
    const bool quantised = four.fp8 ? file_of.count(key + "_scale_inv") > 0
                                    : file_of.count(key + ".quant_state.bitsandbytes__nf4") ||
                                          file_of.count(key + ".quant_state.bitsandbytes__fp4");
    if (file_of.count(key) && !quantised) dense.push_back("'" + key + "' in '" + file_of.at(key) + "'");
  }
  const char* skip = four.fp8 ? "modules_to_not_convert" : "llm_int8_skip_modules";
  TG_CHECK(dense.empty(), "from_pretrained", dir.path_of(kConfig), "'s quantization_config stores every Linear but ",
           skip, " (", name_list(four.config.skip_modules), ") in ", four.fp8 ? "FP8" : "4 bits",
           ", but the files hold ", dense.size(), " of them dense, without a ",
           four.fp8 ? "weight_scale_inv" : "quant_state", ": ", name_list(dense),
           " (drop quantization_config from config.json, or list the dense layers in ", skip, ")");
}

// Reads every weight file into the model's parameters (any dtype and device), checking that the
// files hold exactly the model's tensors. The headers are read and matched first; then each
// tensor's bytes go from its file into its parameter, so the host holds no copy of a shard. With
// four.on the model was built with its Linear weights unallocated (init::SkipInitGuard): each is
// quantised as it arrives, or replaced by the folder's 4-bit state, or allocated and read.
void load_weights(Module& model, const Architecture& arch, const io::Folder& dir, const PretrainedOptions& o,
                  const FourBit& four) {
  std::vector<std::string> unexpected, mismatched, wrong_dtype, missing;
  std::vector<WeightFile> files;
  NoGradGuard no_grad;
  for (const auto& [name, indexed] : weight_files(dir)) {
    files.push_back({std::make_unique<safetensors::FileReader>(dir.open(name)), {}});
    const safetensors::FileReader& file = *files.back().reader;
    std::set<std::string> held;
    for (const auto& t : file.header().tensors) held.insert(t.name);
    for (const auto& key : indexed)
      TG_CHECK(held.count(key), "from_pretrained", "'", dir.path_of(kIndex), "' puts '", key, "' in '", file.path(),
               "', which does not hold it");
  }

  std::set<std::string> consumed, state_names;  // quant_state keys read already; the 4-bit state's names
  std::set<std::string> quantize;                // layers quantised as their weight streams in
  std::vector<std::string> quantize_after;       // ... and those whose weight is another's (a tied head)
  check_4bit_layout(model, arch, files, four, dir);
  if (four.prequantized && four.fp8) install_fp8_shells(model, arch, files, four, o, unexpected);
  else if (four.prequantized) state_names = install_4bit_shells(model, arch, files, four, o, consumed, unexpected);
  std::set<std::string> quantize_experts;        // expert weights quantised once every part of them is read
  if (four.on && !four.prequantized) {
    for (const std::string& layer : linear_4bit_targets(model, four.config, "from_pretrained")) {
      if (init::is_unallocated(model.get_parameter(layer + ".weight"))) quantize.insert(layer);
      else quantize_after.push_back(layer);
    }
    for (const std::string& name : experts_4bit_targets(model, four.config, "from_pretrained"))
      if (init::is_unallocated(model.get_parameter(name))) quantize_experts.insert(name);
  }
  for (auto& [name, t] : model.named_parameters())
    if (init::is_unallocated(t) && !quantize.count(layer_of(name)) && !quantize_experts.count(name))
      init::allocate_unallocated(t);

  const StateDict own = model.state_dict();
  const std::string tied = tied_head(own, arch);
  std::set<std::string> loaded;            // names read whole, and the parts read (hub layouts, MXFP4 halves)
  std::map<std::string, int64_t> filled;  // elements of a parameter read by parts
  uint64_t total = 0;
  auto once = [&](const std::string& id, const std::string& key, const std::string& path) {
    TG_CHECK(loaded.insert(id).second, "from_pretrained", "'", path, "' holds '", key, "', which an earlier file of '",
             dir.path(), "' held too (each tensor belongs to one shard)");
  };
  for (WeightFile& f : files) {
    const std::string& path = f.reader->path();
    for (const safetensors::TensorInfo& value : f.reader->header().tensors) {
      const std::string& key = value.name;
      if (consumed.count(key)) continue;
      if (four.mxfp4 && is_mxfp4_half(key)) {
        const std::string name = own_name(own, key.substr(0, key.size() - 7), tied, arch);
        auto it = own.find(name);
        if (it == own.end() || it->second.dim() != 3 || it->second.shape()[1] % 32 != 0) {
          unexpected.push_back(key + " (MXFP4, but no expert weight '" + name + "' to dequantise into)");
          continue;
        }
        const Shape& p = it->second.shape();  // [E, C, R]: blocks [E, R, C / 32, 16], scales [E, R, C / 32]
        Shape want = {p[0], p[2], p[1] / 32};
        if (key.ends_with("_blocks")) want.push_back(16);
        if (value.shape != want || value.dtype != kUInt8) {
          mismatched.push_back(key + " (file " + value.code + " " + shape_str(value.shape) + ", MXFP4 of " + name +
                               " wants U8 " + shape_str(want) + ")");
          continue;
        }
        once(key, key, path);
        filled[name] += it->second.numel() / 2;  // each half counts for half the weight
        f.reads.push_back({&value, Tensor(), "", false, false, "", name, "", std::nullopt});
        total += value.end - value.begin;
        continue;
      }
      const std::optional<detail::CheckpointPart> part = detail::model_part(arch.checkpoint_layout, key);
      const std::string name =
          own_name(own, part ? part->name : four.prequantized && !four.fp8 ? bnb::tapegrad_name(key) : key, tied, arch);
      if (name == tied) continue;
      auto it = own.find(name);
      if (it == own.end()) {
        bool ignored = false;
        for (const auto& s : arch.ignored_suffixes) ignored = ignored || key.ends_with(s);
        if (!ignored) unexpected.push_back(key);
        continue;
      }
      Read read{&value, part ? detail::part_view(it->second, *part, key) : it->second, "", false, false, "", "",
                "", std::nullopt};
      if (quantize_experts.count(name)) read.experts = name, read.part = part;
      Shape want = read.into.shape();
      if (state_names.count(name)) {
        read.piece = bnb::state_piece(name);
        // bitsandbytes' tensors are read as they are stored, never converted; the packed weight is a column
        if (value.dtype != it->second.dtype()) {
          wrong_dtype.push_back(key + " (file " + value.code + ", bitsandbytes' " +
                                safetensors::dtype_code(it->second.dtype()) + ")");
          continue;
        }
        if (name.ends_with(".weight") && value.shape.size() == 2) {
          want = {want[0], 1};
          read.into = it->second.as_strided(want, {1, 1}, it->second.storage_offset());
        }
      } else if (is_conv1d_weight(model, name)) {
        std::swap(want[0], want[1]);  // Conv1D stores [in, out]
        read.conv1d = true;
        if (!init::is_unallocated(it->second)) read.into = transpose(it->second, 0, 1);
      }
      if (value.shape != want) {
        mismatched.push_back(key + " (file " + shape_str(value.shape) + ", config.json wants " + shape_str(want) + ")");
        continue;
      }
      if (part && part->expert >= 0) {  // one expert's block of a fused parameter (the hub's layout)
        once(name + "#" + std::to_string(part->expert) + "." + std::to_string(part->block), key, path);
        filled[name] += read.into.numel();
      } else {
        once(name, key, path);
      }
      if (name.ends_with(".weight") && quantize.count(layer_of(name))) read.layer = layer_of(name);
      read.whole = read.layer.empty() && !read.conv1d && read.into.same(it->second);
      f.reads.push_back(std::move(read));
      total += value.end - value.begin;
    }
  }
  for (const auto& [name, t] : own) {
    const auto parts = filled.find(name);
    TG_CHECK(!(loaded.count(name) && parts != filled.end()), "from_pretrained", "'", dir.path(), "' holds '", name,
             "' both whole and in parts (per expert, or MXFP4): one layout, please");
    if (parts != filled.end() && parts->second != t.numel())
      missing.push_back(name + " (its parts hold " + std::to_string(parts->second) + " of its " +
                        std::to_string(t.numel()) + " values)");
    else if (parts == filled.end() && !loaded.count(name) && name != tied)
      missing.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty() || !wrong_dtype.empty()) {
    std::string msg = "the weights in '" + dir.path() + "' do not fit the " + arch.name + " of its config.json:";
    if (!missing.empty()) msg += "\n  missing (" + std::to_string(missing.size()) + "): " + name_list(missing);
    if (!unexpected.empty()) msg += "\n  unexpected (" + std::to_string(unexpected.size()) + "): " + name_list(unexpected);
    if (!mismatched.empty()) msg += "\n  wrong shape (" + std::to_string(mismatched.size()) + "): " + name_list(mismatched);
    if (!wrong_dtype.empty())
      msg += "\n  wrong dtype (" + std::to_string(wrong_dtype.size()) + "): " + name_list(wrong_dtype);
    fail("from_pretrained", msg);
  }

  // One layer's weight at a time in o.dtype on o.device, quantised there into its Linear4bit.
  int64_t largest_dense = 0;
  for (const std::string& layer : quantize) largest_dense = std::max(largest_dense, own.at(layer + ".weight").numel());
  int64_t largest = largest_dense;
  for (const std::string& layer : quantize_after) largest = std::max(largest, own.at(layer + ".weight").numel());
  const Tensor staging = largest_dense ? Tensor::empty({largest_dense}, {*o.dtype, o.device}) : Tensor();
  const Tensor workspace = largest && !four.config.load_in_fp8
                               ? Tensor::empty({largest}, {four.config.compute_dtype, o.device}) : Tensor();
  // The layer's weight `w` (file key `key`) quantised into the layer that replaces it.
  auto install = [&](const std::string& layer, const std::string& key, const Tensor& w) {
    const DType compute = four.config.compute_dtype;
    try {
      if (four.config.load_in_fp8) return install_linear_fp8(model, layer, quantize_fp8(w, four.config.fp8_scaling), compute);
      install_linear_4bit(model, layer,
                          quantize_4bit(w, four.config.quant_type, four.config.double_quant, four.config.blocksize),
                          compute, workspace);
    } catch (const Error& e) {
      fail("from_pretrained", "'", dir.path(), "': '", key, "': ", e.what());
    }
  };
  Progress progress(dir.path(), total, total > kProgressBytes && !o.quiet && ::isatty(STDERR_FILENO));
  auto told = [&](size_t n) { progress.add(n); };
  // To a GPU: one pair of pinned buffers for every file, reads overlapping the copies.
  std::optional<HostToDevice> upload;
  if (o.device.is_cuda()) upload.emplace(o.device, size_t{64} << 20);
  HostToDevice* via = upload ? &*upload : nullptr;
  std::map<std::string, std::pair<Tensor, Tensor>> halves;  // MXFP4 blocks and scales until both are read
  // An expert weight in quantize_experts: its memory at its first read, quantised into its block
  // and given back once every value has arrived (one layer's experts dense at a time).
  std::map<std::string, int64_t> arrived;
  auto expert_weight = [&](const std::string& name) {
    const Tensor& param = own.at(name);
    if (init::is_unallocated(param)) init::allocate_unallocated(param);
    return param;
  };
  auto arrive = [&](const std::string& name, int64_t values) {
    const Tensor& param = own.at(name);
    if ((arrived[name] += values) < param.numel()) return;
    const size_t dot = name.rfind('.');
    auto& block = dynamic_cast<MoeExperts&>(*model.get_submodule(name.substr(0, dot)));
    try {
      block.quantize_4bit(name.substr(dot + 1), four.config.quant_type, four.config.double_quant,
                          four.config.blocksize);
    } catch (const Error& e) {
      // named as the model holds it: its values may come from several of the folder's tensors
      fail("from_pretrained", "'", dir.path(), "': '", name, "' (as read from the folder): ", e.what());
    }
    init::deallocate(param);
  };
  for (WeightFile& f : files) {
    for (const Read& r : f.reads) {
      if (!r.mxfp4.empty()) {
        Tensor bytes = Tensor::empty(r.tensor->shape, {kUInt8});
        f.reader->read(*r.tensor, bytes, told);
        auto& [blocks, scales] = halves[r.mxfp4];
        (r.tensor->name.ends_with("_blocks") ? blocks : scales) = bytes;
        if (blocks.defined() && scales.defined()) {
          const Tensor param = quantize_experts.count(r.mxfp4) ? expert_weight(r.mxfp4) : own.at(r.mxfp4);
          copy_(param, detail::dequantize_mxfp4(blocks, scales, r.mxfp4));
          halves.erase(r.mxfp4);
          if (quantize_experts.count(r.mxfp4)) arrive(r.mxfp4, param.numel());
        }
        continue;
      }
      Tensor into = r.into;
      if (!r.experts.empty()) {
        const Tensor param = expert_weight(r.experts);
        into = r.part ? detail::part_view(param, *r.part, r.tensor->name) : param;
      }
      // On the host in the file's dtype the parameter takes memory the kernel copied the tensor
      // into: no zero-filled pages first, whose first touch made reading 2-4x slower (dev/NOTES.md),
      // and, unlike a mapping of the file, nothing later done to the file changes the model.
      Tensor copy;
      if (o.device.is_cpu() && r.whole && into.dtype() == r.tensor->dtype) copy = f.reader->owned(*r.tensor);
      if (copy.defined()) {
        into.impl().storage = copy.storage();
        into.impl().offset = 0;
        progress.add(into.nbytes());
      } else if (r.layer.empty()) {
        f.reader->read(*r.tensor, into, told, via);
      }
      if (!r.experts.empty()) arrive(r.experts, into.numel());
      if (!r.piece.empty()) bnb::check_state_piece(into, r.piece, four.config.quant_type, r.tensor->name, f.reader->path());
      if (r.layer.empty()) continue;
      const Shape& shape = own.at(r.layer + ".weight").shape();
      const Tensor w = staging.as_strided(shape, contiguous_strides(shape), 0);
      f.reader->read(*r.tensor, r.conv1d ? transpose(w, 0, 1) : w, told, via);
      install(r.layer, r.tensor->name, w);
    }
    f.reader.reset();  // its staging buffer and file with it
  }
  for (const std::string& layer : quantize_after) install(layer, layer + ".weight", own.at(layer + ".weight"));
  if (four.prequantized)
    for (auto& [path, m] : model.named_modules()) {
      if (auto* q = dynamic_cast<Linear4bit*>(m)) check_quant_state(q->quant_state, path + ".weight", "from_pretrained");
      if (auto* q = dynamic_cast<LinearFp8*>(m))
        fp8_checkpoint::check_scales(q->fp8.scale_inv, path + ".weight_scale_inv", dir.path());
    }
}

// config.json's dtype (torch_dtype before transformers 5), as from_pretrained's "auto" reads it.
DType folder_dtype(const Fields& f) {
  const char* key = f.get("dtype") ? "dtype" : "torch_dtype";
  const std::string name = f.string(key, "float32");
  if (name == "bfloat16") return kBFloat16;
  if (name == "float32" || name == "float16") return kFloat32;  // float16 widened, as F16 tensors are
  f.bad(key, "\"float32\", \"bfloat16\" or \"float16\" (or load with options.dtype)");
}

std::shared_ptr<CausalLM> build(const Architecture& arch, const Fields& f, const io::Folder& dir,
                                const PretrainedOptions& options) {
  PretrainedOptions o = options;
  if (!o.dtype) o.dtype = folder_dtype(f);
  const ModelBuilder builder = arch.parse(f);
  const FourBit four = four_bit(f, o);
  Generator gen(0);  // no value is drawn from it; the caller's default generator is left alone
  std::shared_ptr<CausalLM> model;
  {
    // Parameters made in their final dtype and place, uninitialised: their values come from the
    // files. Quantised, the Linear weights are not even allocated (load_weights decides).
    init::SkipInitGuard no_init({*o.dtype, o.device}, four.on);
    model = builder.build(gen);
  }
  load_weights(*model, arch, dir, o, four);
  model->to(*o.dtype, o.device);  // the buffers (RoPE tables); after the load, which allocates every weight
  model->eval();  // as transformers' from_pretrained
  model->name_or_path = dir.path();
  return model;
}

template <class Model>
std::shared_ptr<Model> from_pretrained_as(const std::string& dir, const PretrainedOptions& options, const char* op) {
  const io::Folder folder = open_model_folder(dir);
  const Fields f = read_config(folder);
  const Architecture& arch = architecture(f);
  std::shared_ptr<CausalLM> model = build(arch, f, folder, options);
  auto typed = std::dynamic_pointer_cast<Model>(model);
  TG_CHECK(typed, op, "'", f.source(), "' describes a ", arch.name, ", which is not a ", model->type_name(),
           " (from_pretrained loads any of ", architecture_names(), ")");
  return typed;
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

// The Linear4bit layers' tensors of `tensors` (tapegrad's names) replaced by bitsandbytes' (nn/models/detail/bnb_4bit.h),
// and the QuantizationConfig that describes them (the unquantised Linear layers as skip_modules);
// nullopt when the model has none.
std::optional<QuantizationConfig> quantized_layers(const Module& model, safetensors::TensorMap& tensors) {
  std::optional<QuantizationConfig> config;
  std::vector<std::string> dense;
  for (auto& [path, m] : const_cast<Module&>(model).named_modules()) {
    TG_CHECK(!dynamic_cast<const LinearFp8*>(m), "save_pretrained", "'", path, "' is an FP8 layer (LinearFp8): writing "
             "an FP8 base is not implemented; save the adapter (peft's), or merge_and_unload to a dense model first");
    const auto* experts = dynamic_cast<const MoeExperts*>(m);
    TG_CHECK(!experts || !experts->quantized(), "save_pretrained", "'", path, "' holds its experts in 4 bits (QLoRA's "
             "base), which bitsandbytes' layout has no place for; save the adapter (peft's), or merge_and_unload to a "
             "dense model first");
    const auto* q = dynamic_cast<const Linear4bit*>(m);
    if (!q) {
      if (const auto* l = dynamic_cast<const Linear*>(m); l && l->is_plain() && !path.empty()) dense.push_back(path);
      continue;
    }
    const QuantState4bit& s = q->quant_state;
    const QuantizationConfig layer{.load_in_4bit = true, .quant_type = s.quant_type, .double_quant = s.nested(),
                                   .compute_dtype = q->compute_dtype, .skip_modules = {}, .blocksize = s.blocksize};
    if (!config) config = layer;
    TG_CHECK(config->quant_type == layer.quant_type && config->double_quant == layer.double_quant &&
                 config->compute_dtype == layer.compute_dtype,
             "save_pretrained", "'", path, "' is quantised as ", layer.quant_type, layer.double_quant ? " (double)" : "",
             " computing in ", layer.compute_dtype, ", another layer as ", config->quant_type,
             config->double_quant ? " (double)" : "", " in ", config->compute_dtype,
             ": config.json's quantization_config describes one format");
    for (const char* piece : {"weight", "absmax", "quant_map", "nested_absmax", "nested_quant_map"})
      tensors.erase(path + "." + piece);
    for (auto& [key, t] : bnb::state_tensors(s, path)) tensors[key] = t;
  }
  if (config) config->skip_modules = dense;
  return config;
}

}  // namespace

bool is_hf_conv1d(const Module& model, const std::string& path) {
  const auto* lm = dynamic_cast<const CausalLM*>(&model);
  if (!lm) return false;
  for (const std::string& layer : lm->architecture().conv1d_layers)
    if (path.ends_with("." + layer) && path.starts_with(lm->architecture().base_prefix)) return true;
  return false;
}

ModelBuilder parse_pretrained_config(const std::string& json_text, const std::string& source) {
  const Fields f = parse_fields(std::vector<uint8_t>(json_text.begin(), json_text.end()), source);
  return architecture(f).parse(f);
}

std::vector<safetensors::TensorInfo> pretrained_tensors(const std::string& dir) {
  const io::Folder folder = open_model_folder(dir);
  std::vector<safetensors::TensorInfo> out;
  for (const auto& [name, indexed] : weight_files(folder)) {
    const safetensors::FileReader file(folder.open(name));
    out.insert(out.end(), file.header().tensors.begin(), file.header().tensors.end());
  }
  return out;
}

DType pretrained_dtype(const std::string& dir) { return folder_dtype(read_config(open_model_folder(dir))); }

std::shared_ptr<LlamaForCausalLM> from_pretrained_llama(const std::string& dir, const PretrainedOptions& options) {
  return from_pretrained_as<LlamaForCausalLM>(dir, options, "from_pretrained_llama");
}

std::shared_ptr<GPT2LMHeadModel> from_pretrained_gpt2(const std::string& dir, const PretrainedOptions& options) {
  return from_pretrained_as<GPT2LMHeadModel>(dir, options, "from_pretrained_gpt2");
}

std::shared_ptr<CausalLM> from_pretrained(const std::string& dir, const PretrainedOptions& options) {
  const io::Folder folder = open_model_folder(dir);
  const Fields f = read_config(folder);
  return build(architecture(f), f, folder, options);
}

void save_pretrained(const Module& model, const std::string& dir, const SaveOptions& options) {
  const auto* lm = dynamic_cast<const CausalLM*>(&model);
  TG_CHECK(lm, "save_pretrained", model.type_name(), " has no transformers counterpart (", architecture_names(), ")");
  const Architecture& arch = lm->architecture();
  json::Value config = lm->config_json();
  TG_CHECK(options.max_shard_bytes >= 0, "save_pretrained", "max_shard_bytes must be >= 0, got ",
           options.max_shard_bytes);
  const StateDict own = model.state_dict();
  const std::string tied = tied_head(own, arch);
  safetensors::TensorMap tensors;
  NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    TG_CHECK(!name.ends_with(".lora_A.weight") && !name.ends_with(".lora_B.weight"), "save_pretrained", "'", name,
             "' is a LoRA weight: merge_and_unload the model first, or save the adapter with peft::save_adapter");
    if (name == tied) continue;
    if (is_conv1d_weight(model, name) && t.dtype() != kUInt8) {
      tensors[name] = contiguous(transpose(t, 0, 1));
      continue;
    }
    for (const auto& [key, part] : detail::hub_tensors(arch.checkpoint_layout, name, t)) tensors[key] = contiguous(part);
  }
  if (const std::optional<QuantizationConfig> q = quantized_layers(model, tensors))
    config.set("quantization_config", bnb::quantization_config_json(*q));
  config.set("tie_word_embeddings", !tied.empty());
  config.set("dtype", dtype_name(own.at(arch.embedding).dtype()));  // transformers 5 loads in this dtype

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
