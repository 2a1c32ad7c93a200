#include "nn/models/gguf.h"

#include <algorithm>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "nn/models/architecture.h"
#include "nn/moe.h"
#include "ops/shape.h"

namespace tg::nn {
namespace {

using gguf::TensorType;

constexpr int64_t kChunkValues = int64_t{1} << 20;  // values read from the model at a time (4 MB)

void check_dtype(TensorType dtype, const char* who) {
  TG_CHECK(dtype == TensorType::kF32 || dtype == TensorType::kF16 || dtype == TensorType::kBF16 ||
               dtype == TensorType::kQ8_0,
           who, "dtype ", gguf::type_name(dtype), " is not one tapegrad writes (F32, F16, BF16, Q8_0; ",
           "llama.cpp's llama-quantize makes the others from an F16 file)");
}

// [rows, cols] as the file stores them: 1-D tensors are one row; a rope head's rows are rows.
int64_t rows_of(const Tensor& t) { return t.dim() == 1 ? 1 : t.shape()[0]; }

TensorType type_of(const GgufTensor& t, TensorType dtype) {
  if (t.keep_f32 || t.source.dim() < 2) return TensorType::kF32;
  const int64_t cols = t.source.shape().back();
  if (cols % gguf::block_size(dtype) != 0) return TensorType::kF16;  // the converter's fallback
  return dtype;
}

// Streams the rows of `src` along dimension `row_dim` (its other dimensions before it of size 1),
// transformed as t says and encoded as `type`, a chunk of rows at a time.
void write_rows(const GgufTensor& t, const Tensor& src, int64_t row_dim, TensorType type, const io::ChunkWriter& out) {
  // Row r of the permuted tensors: the read is in rows of one value for a 1-D bias.
  const int64_t n = src.numel(), read_rows = src.dim() == 1 ? n : src.shape()[row_dim],
                cols = n / std::max<int64_t>(read_rows, 1);
  const int64_t head = t.rope_head_dim;
  const int64_t step = head > 0 ? std::max<int64_t>(1, kChunkValues / cols / head) * head
                                : std::max<int64_t>(1, kChunkValues / std::max<int64_t>(cols, 1));
  std::vector<float> values(static_cast<size_t>(std::min(read_rows, step) * cols)), reordered;
  std::vector<uint8_t> encoded;
  const int64_t file_cols = src.dim() == 1 ? n : cols;
  const uint64_t row_bytes = gguf::row_bytes(type, file_cols);
  for (int64_t r0 = 0; r0 < read_rows; r0 += step) {
    const int64_t r1 = std::min(read_rows, r0 + step), count = (r1 - r0) * cols;
    read_to_host(slice(src, row_dim, r0, r1), kFloat32, values.data());
    const float* v = values.data();
    if (head > 0) {  // dst row 2i + j of a head <- src row j * head / 2 + i
      reordered.resize(static_cast<size_t>(count));
      for (int64_t h = 0; h < (r1 - r0) / head; ++h)
        for (int64_t i = 0; i < head / 2; ++i)
          for (int64_t j = 0; j < 2; ++j)
            std::copy_n(v + (h * head + j * head / 2 + i) * cols, cols, reordered.data() + (h * head + 2 * i + j) * cols);
      v = reordered.data();
    }
    if (t.add != 0.0f) {
      if (v == values.data()) {
        for (int64_t i = 0; i < count; ++i) values[i] += t.add;
      } else {
        for (int64_t i = 0; i < count; ++i) reordered[i] += t.add;
      }
    }
    if (type == TensorType::kF32) {
      out(v, static_cast<size_t>(count) * sizeof(float));
      continue;
    }
    const int64_t out_rows = count / file_cols;
    encoded.resize(static_cast<size_t>(row_bytes * out_rows));
    parallel_for(0, out_rows, std::max<int64_t>(1, 65536 / file_cols), [&](int64_t b, int64_t e) {
      gguf::encode(type, v + b * file_cols, (e - b) * file_cols, encoded.data() + b * row_bytes);
    });
    out(encoded.data(), encoded.size());
  }
}

// Streams t's values: a 3-D source (stacked experts) one expert after another.
void write_tensor(const GgufTensor& t, TensorType type, const io::ChunkWriter& out) {
  NoGradGuard no_grad;
  if (t.source.dim() < 3) return write_rows(t, t.source, 0, type, out);
  for (int64_t e = 0; e < t.source.shape()[0]; ++e) write_rows(t, slice(t.source, 0, e, e + 1), 1, type, out);
}

}  // namespace

uint32_t gguf_file_type(TensorType dtype) {
  check_dtype(dtype, "save_gguf: ");
  switch (dtype) {
    case TensorType::kF32: return 0;
    case TensorType::kF16: return 1;
    case TensorType::kQ8_0: return 7;
    default: return 32;  // BF16
  }
}

GgufModel gguf_model(const CausalLM& model) {
  const Architecture& arch = model.architecture();
  TG_CHECK(static_cast<bool>(arch.gguf), "save_gguf", arch.name, " has no llama.cpp architecture tapegrad writes");
  for (auto& [path, m] : const_cast<CausalLM&>(model).named_modules())
    if (const auto* experts = dynamic_cast<const MoeExperts*>(m))
      TG_CHECK(!experts->quantized(), "save_gguf", "'", path, "' holds its experts in 4 bits (QLoRA's base): tapegrad "
               "writes no GGUF of a 4-bit base; export from the bf16 folder with the adapter");
  return arch.gguf(model);
}

void write_gguf_tensors(const std::string& path, const gguf::Metadata& metadata, const std::vector<GgufTensor>& tensors,
                        TensorType dtype) {
  check_dtype(dtype, "save_gguf: ");
  std::vector<gguf::TensorData> data;
  for (const GgufTensor& t : tensors) {
    TG_CHECK(t.source.defined() && t.source.dim() >= 1 && t.source.dim() <= 3, "save_gguf", "tensor '", t.name,
             "' wants a 1-D, 2-D or 3-D source, got ", t.source.defined() ? t.source.dim() : 0, " dims");
    TG_CHECK(t.rope_head_dim == 0 || t.source.dim() < 3, "save_gguf", "tensor '", t.name,
             "' is 3-D: rope_head_dim reorders the rows of a 2-D q or k");
    TG_CHECK(is_floating_point(t.source.dtype()), "save_gguf", "tensor '", t.name, "' is ", t.source.dtype(),
             ": GGUF export needs the dense weights (load the model without load_in_4bit)");
    TG_CHECK(t.rope_head_dim == 0 || (t.rope_head_dim % 2 == 0 && rows_of(t.source) % t.rope_head_dim == 0) ||
                 (t.source.dim() == 1 && t.source.numel() % t.rope_head_dim == 0),
             "save_gguf", "tensor '", t.name, "' has ", t.source.shape()[0], " rows, not whole heads of ", t.rope_head_dim);
    const TensorType type = type_of(t, dtype);
    gguf::TensorInfo info{.name = t.name, .ne = {}, .type = type};
    for (auto it = t.source.shape().rbegin(); it != t.source.shape().rend(); ++it) info.ne.push_back(*it);
    data.push_back({std::move(info), [&t, type](const io::ChunkWriter& out) { write_tensor(t, type, out); }});
  }
  gguf::write_file(path, metadata, data);
}

void save_gguf(const CausalLM& model, const std::string& path, const GgufOptions& options) {
  check_dtype(options.dtype, "save_gguf: ");
  for (const auto& [name, t] : model.named_parameters())
    TG_CHECK(name.find(".lora_A.") == std::string::npos && name.find(".lora_B.") == std::string::npos, "save_gguf", "'",
             name, "' is a LoRA weight: merge_and_unload the model first, or save the adapter with ",
             "peft::save_adapter_gguf");
  const GgufModel gm = gguf_model(model);
  const gguf::Value* tokens = options.metadata.find("tokenizer.ggml.tokens");
  TG_CHECK(tokens, "save_gguf", "options.metadata has no tokenizer (tokenizer.ggml.*), without which llama.cpp loads ",
           "no model: pass data::gguf_tokenizer_metadata(tokenizer, vocab_size)");
  const int64_t vocab = model.dims().vocab_size;
  const auto n_tokens = static_cast<int64_t>(tokens->items("tokenizer.ggml.tokens").size());
  TG_CHECK(n_tokens == vocab, "save_gguf", "the tokenizer lists ", n_tokens, " tokens, the model has ", vocab,
           " embeddings: llama.cpp wants one token per embedding row");

  using gguf::Value;
  gguf::Metadata m;
  m.set("general.architecture", Value::string(gm.architecture)).set("general.type", Value::string("model"));
  for (const auto& [key, value] : gm.hparams.entries()) m.set(key, value);
  m.set("general.file_type", Value::uint32(gguf_file_type(options.dtype)));
  m.set("general.quantization_version", Value::uint32(2));
  for (const auto& [key, value] : options.metadata.entries()) m.set(key, value);
  write_gguf_tensors(path, m, gm.tensors, options.dtype);
}

}  // namespace tg::nn
