#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/autograd.h"
#include "core/parallel.h"
#include "core/primitives.h"
#include "io/detail/float16.h"
#include "io/file.h"
#include "io/json.h"
#include "ops/cast.h"

namespace tg::safetensors {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace {

// The Rust reference implementation refuses headers above 100 MB; so do we, so that a corrupt
// length cannot make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// How a file dtype is read: its element size and the tensor dtype it becomes.
struct FileDType {
  const char* code;
  size_t size;
  DType dtype;
};
constexpr FileDType kFileDTypes[] = {
    {"F64", 8, kFloat64}, {"F32", 4, kFloat32}, {"F16", 2, kFloat32},  // F16 is widened
    {"BF16", 2, kBFloat16}, {"I64", 8, kInt64}, {"I32", 4, kInt32}, {"BOOL", 1, kBool},
    {"U8", 1, kUInt8}, {"F8_E4M3", 1, kUInt8},  // FP8 checkpoints' weights: their bytes (ops/fp8.h)
};
// Known to safetensors, but tapegrad has no such tensors.
constexpr const char* kUnsupported[] = {"F8_E5M2", "I8", "I16", "U16", "U32", "U64", "C64"};

const FileDType* find_dtype(const std::string& code) {
  for (const auto& d : kFileDTypes)
    if (code == d.code) return &d;
  return nullptr;
}

json::Value header_json(const TensorMap& tensors, const Metadata& metadata) {
  json::Value header = json::Value::object();
  if (!metadata.empty()) {
    json::Value meta = json::Value::object();
    for (const auto& [k, v] : metadata) meta.set(k, v);
    header.set("__metadata__", meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TG_CHECK(t.defined(), "safetensors", "tensor '", name, "' is undefined");
    TG_CHECK(name != "__metadata__", "safetensors", "'__metadata__' is reserved and cannot name a tensor");
    json::Value shape = json::Value::array();
    for (int64_t s : t.shape()) shape.push_back(s);
    uint64_t end = offset + t.nbytes();
    header.set(name, json::Value::object()
                         .set("dtype", dtype_code(t.dtype()))
                         .set("shape", shape)
                         .set("data_offsets", json::Value::array({static_cast<int64_t>(offset),
                                                                  static_cast<int64_t>(end)})));
    offset = end;
  }
  return header;
}

void write_to(const TensorMap& tensors, const Metadata& metadata, const io::ChunkWriter& write) {
  std::string header = json::dump(header_json(tensors, metadata));
  // Pad with spaces so the data area starts 8-byte aligned (as the Rust writer does).
  header.append((8 - header.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  write(len, 8);
  write(header.data(), header.size());
  std::vector<uint8_t> buf;
  for (const auto& [name, t] : tensors) {
    buf.resize(t.nbytes());
    if (!buf.empty()) read_to_host(t, t.dtype(), buf.data());  // row-major, any device or strides
    write(buf.data(), buf.size());
  }
}

// What `t` is read as: its file dtype's entry (read_header checked it exists).
const FileDType& file_dtype(const TensorInfo& t) { return *find_dtype(t.code); }

// Whether t's file bytes are its elements as they are (all but F16 and BOOL).
bool is_raw(const TensorInfo& t) { return t.code != "F16" && t.code != "BOOL"; }

// `count` elements of t's file dtype at src, as t.dtype elements at dst.
void decode(const TensorInfo& t, const uint8_t* src, size_t count, void* dst) {
  if (t.code == "F16") {
    auto* out = static_cast<float*>(dst);
    for (size_t i = 0; i < count; ++i)
      out[i] = io::detail::half_to_float(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
  } else if (t.code == "BOOL") {
    auto* out = static_cast<uint8_t*>(dst);
    for (size_t i = 0; i < count; ++i) out[i] = src[i] != 0;  // any other byte value is not a C++ bool
  } else if (count > 0) {
    std::memcpy(dst, src, count * file_dtype(t).size);
  }
}

// copy_(dst, src) on the host, rows (dim 0) split between the pool's threads: the conversion of
// a float32 load of bf16 files, and the first touch of the parameters' fresh pages.
void convert_rows(const Tensor& dst, const Tensor& src) {
  detail::check_writable("safetensors", dst);
  dst.bump_version();  // once: the threads write dst's storage directly
  const int64_t rows = dst.shape()[0], per_row = rows ? dst.numel() / rows : 0;
  auto part = [](const Tensor& t, int64_t b, int64_t e) {
    Shape shape = t.shape();
    shape[0] = e - b;
    return t.as_strided(shape, t.strides(), t.storage_offset() + b * t.stride(0));
  };
  parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, per_row)),
               [&](int64_t b, int64_t e) { detail::cpu_copy(part(dst, b, e), part(src, b, e)); });
}

// A contiguous tensor of `dtype` and `shape` over the first bytes of `buffer` (a kUInt8 tensor).
Tensor view_bytes(const Tensor& buffer, DType dtype, const Shape& shape) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = buffer.storage();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  TG_CHECK(nbytes_of(shape, element_size(dtype)) <= buffer.nbytes(), "safetensors", "staging buffer of ",
           buffer.nbytes(), " bytes is too small for ", dtype, " ", shape);
  return Tensor(std::move(impl));
}

// `buffer` (kUInt8 on the host), grown to at least n bytes.
void reserve(Tensor& buffer, size_t n) {
  if (!buffer.defined() || buffer.nbytes() < n) buffer = Tensor::empty({static_cast<int64_t>(n)}, {kUInt8, Device::cpu()});
}

}  // namespace

const char* dtype_code(DType dtype) {
  switch (dtype) {
    case kFloat64: return "F64";
    case kFloat32: return "F32";
    case kBFloat16: return "BF16";
    case kInt64: return "I64";
    case kInt32: return "I32";
    case kBool: return "BOOL";
    case kUInt8: return "U8";
  }
  fail("safetensors", "no safetensors code for dtype ", dtype);
}

std::vector<uint8_t> serialize(const TensorMap& tensors, const Metadata& metadata) {
  std::vector<uint8_t> out;
  write_to(tensors, metadata, [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

Header read_header(const RangeReader& read, uint64_t size, const std::string& source) {
  auto bad = [&](const auto&... what) { fail("safetensors", "'", source, "': ", what...); };
  if (size < 8) bad("file is ", size, " bytes, shorter than the 8-byte header length");
  uint8_t len[8];
  read(0, len, 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > kMaxHeaderBytes) bad("header length ", n, " is absurd (limit ", kMaxHeaderBytes, " bytes)");
  if (n > size - 8) bad("header length ", n, " runs past the end of the file (", size, " bytes)");
  const uint64_t data_size = size - 8 - n;
  std::string text(n, '\0');
  read(8, text.data(), n);

  json::Value header;
  try {
    header = json::parse(text);
  } catch (const Error& e) {
    bad("invalid JSON header: ", e.what());
  }
  if (!header.is_object()) bad("header is a JSON ", json::Value::type_name(header.type()), ", wants an object");

  Header out;
  out.data_start = 8 + n;
  std::vector<TensorInfo> entries;
  for (size_t i = 0; i < header.size(); ++i) {
    const std::string& name = header.keys()[i];
    const json::Value& v = header.values()[i];
    if (name == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ must be an object of strings");
      for (size_t j = 0; j < v.size(); ++j) {
        if (!v.values()[j].is_string()) bad("__metadata__ value of '", v.keys()[j], "' is not a string");
        out.metadata[v.keys()[j]] = v.values()[j].as_string();
      }
      continue;
    }
    const json::Value* dt = v.find("dtype");
    const json::Value* sh = v.find("shape");
    const json::Value* off = v.find("data_offsets");
    if (!v.is_object() || !dt || !sh || !off)
      bad("tensor '", name, "' must be an object with dtype, shape and data_offsets");
    if (!dt->is_string()) bad("tensor '", name, "': dtype is not a string");
    const FileDType* dtype = find_dtype(dt->as_string());
    if (!dtype) {
      const std::string& code = dt->as_string();
      bool known = std::any_of(std::begin(kUnsupported), std::end(kUnsupported), [&](const char* c) { return code == c; });
      bad("tensor '", name, "' has ", known ? "unsupported" : "unknown", " dtype '", code,
          "' (tapegrad reads F64, F32, F16, BF16, I64, I32, BOOL, U8, F8_E4M3)");
    }
    TensorInfo e{name, dtype->code, dtype->dtype, {}, 0, 0};
    if (!sh->is_array()) bad("tensor '", name, "': shape is not an array");
    // numel and the product ignoring zero dims must both fit, or strides could overflow.
    uint64_t numel = 1, extent = 1;
    for (const auto& d : sh->as_array()) {
      if (!d.is_int() || d.as_int() < 0) bad("tensor '", name, "': shape entries must be integers >= 0");
      uint64_t s = static_cast<uint64_t>(d.as_int());
      if (__builtin_mul_overflow(numel, s, &numel) || __builtin_mul_overflow(extent, std::max<uint64_t>(s, 1), &extent) ||
          extent > (uint64_t{1} << 62))
        bad("tensor '", name, "': shape is too large");
      e.shape.push_back(static_cast<int64_t>(s));
    }
    if (!off->is_array() || off->size() != 2 || !off->as_array()[0].is_int() || !off->as_array()[1].is_int() ||
        off->as_array()[0].as_int() < 0 || off->as_array()[1].as_int() < 0)
      bad("tensor '", name, "': data_offsets must be two integers >= 0");
    e.begin = static_cast<uint64_t>(off->as_array()[0].as_int());
    e.end = static_cast<uint64_t>(off->as_array()[1].as_int());
    if (e.begin > e.end) bad("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    if (e.end > data_size)
      bad("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] lie outside the data area (", data_size,
          " bytes)");
    uint64_t want = 0;
    if (__builtin_mul_overflow(numel, dtype->size, &want) || want != e.end - e.begin)
      bad("tensor '", name, "': ", dtype->code, " ", detail::to_text(e.shape), " needs ", numel, " x ", dtype->size,
          " bytes, data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin);
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data area exactly: sorted by offset, each starts where the last ended.
  std::stable_sort(entries.begin(), entries.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& e : entries) {
    if (e.begin < covered)
      bad("tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end, "] overlap tensor '", prev->name, "' [",
          prev->begin, ", ", prev->end, "]");
    if (e.begin > covered) bad("bytes [", covered, ", ", e.begin, ") of the data area belong to no tensor");
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size) bad("the data area is ", data_size, " bytes but the tensors cover ", covered);
  out.tensors = std::move(entries);
  return out;
}

Loaded deserialize(const uint8_t* data, size_t size, const std::string& source, Device device) {
  const Header header = read_header([&](uint64_t offset, void* out, size_t n) { std::memcpy(out, data + offset, n); },
                                    size, source);
  Loaded out;
  out.metadata = header.metadata;
  for (const TensorInfo& e : header.tensors) {
    Tensor t = Tensor::empty(e.shape, {e.dtype, Device::cpu()});
    decode(e, data + header.data_start + e.begin, static_cast<size_t>(t.numel()), t.data_ptr());
    out.tensors[e.name] = device.is_cpu() ? t : to(t, device);
  }
  return out;
}

FileReader::FileReader(io::File file) : file_(std::move(file)) {
  header_ = read_header([&](uint64_t offset, void* out, size_t n) { file_.read_at(offset, out, n); }, file_.size(),
                        file_.path());
}

Tensor FileReader::owned(const TensorInfo& t) {
  const uint64_t bytes = t.end - t.begin;
  if (!is_raw(t) || bytes == 0) return {};
  std::shared_ptr<uint8_t> memory = file_.copy_to_memory(header_.data_start + t.begin, bytes);
  if (!memory) return {};
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(memory.get(), static_cast<size_t>(bytes), memory);
  impl->shape = t.shape;
  impl->strides = contiguous_strides(t.shape);
  impl->dtype = t.dtype;
  return Tensor(std::move(impl));
}

void FileReader::read_parallel(uint64_t offset, void* out, uint64_t n) {
  // By as many threads as there are cores: most of the time goes to the kernel's copying from the
  // page cache and faulting in the destination's fresh pages.
  constexpr uint64_t kPiece = 8 << 20;
  auto* p = static_cast<uint8_t*>(out);
  parallel_for(0, static_cast<int64_t>((n + kPiece - 1) / kPiece), 1, [&](int64_t b, int64_t e) {
    for (uint64_t at = b * kPiece; at < std::min(n, e * kPiece); at += kPiece)
      file_.read_at(offset + at, p + at, static_cast<size_t>(std::min(kPiece, n - at)));
  });
}

void FileReader::read_to_device(const TensorInfo& t, const Tensor& dst, HostToDevice& up,
                                const std::function<void(size_t)>& told) {
  const uint64_t start = header_.data_start + t.begin, bytes = t.end - t.begin, chunk = up.buffer_bytes();
  if (dst.dtype() == t.dtype && dst.is_contiguous()) {  // the file's bytes are the tensor's
    detail::check_writable("safetensors", dst);
    dst.bump_version();
    auto* out = static_cast<uint8_t*>(dst.data_ptr());
    for (uint64_t at = 0; at < bytes; at += chunk) {
      const uint64_t n = std::min(chunk, bytes - at);
      void* buf = up.buffer();
      read_parallel(start + at, buf, n);
      up.send(out + at, static_cast<size_t>(n));
      told(static_cast<size_t>(n));
    }
    return;
  }
  // Converted (or strided) on the device: whole rows through a device buffer of the file's dtype,
  // each chunk a view of dst as in read()'s staging.
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const uint64_t row_bytes = bytes / static_cast<uint64_t>(rows);
  const int64_t per_chunk = static_cast<int64_t>(chunk / row_bytes);
  const Tensor stage = Tensor::empty({static_cast<int64_t>(per_chunk * row_bytes)}, {kUInt8, dst.device()});
  for (int64_t r = 0; r < rows; r += per_chunk) {
    const int64_t k = std::min(per_chunk, rows - r);
    const uint64_t n = static_cast<uint64_t>(k) * row_bytes;
    void* buf = up.buffer();
    read_parallel(start + static_cast<uint64_t>(r) * row_bytes, buf, n);
    up.send(stage.data_ptr(), static_cast<size_t>(n));
    Shape shape = t.shape;
    if (!shape.empty()) shape[0] = k;
    copy_(t.shape.empty() ? dst : dst.as_strided(shape, dst.strides(), dst.storage_offset() + r * dst.stride(0)),
          view_bytes(stage, t.dtype, shape));
    told(static_cast<size_t>(n));
  }
}

void FileReader::read(const TensorInfo& t, const Tensor& dst, const std::function<void(size_t)>& progress,
                      HostToDevice* upload) {
  TG_CHECK(dst.shape() == t.shape, "safetensors", "'", path(), "': tensor '", t.name, "' is ", t.shape,
           ", read into a tensor of shape ", dst.shape());
  constexpr uint64_t kChunk = 64 << 20;  // large enough for disk speed, small enough to stage
  const uint64_t start = header_.data_start + t.begin, bytes = t.end - t.begin;
  auto told = [&](size_t n) {
    if (progress) progress(n);
  };
  if (dst.device().is_cpu() && dst.dtype() == t.dtype && dst.is_contiguous() && is_raw(t)) {
    detail::check_writable("safetensors", dst);
    dst.bump_version();
    read_parallel(start, dst.data_ptr(), bytes);
    return told(static_cast<size_t>(bytes));
  }
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  if (dst.device().is_cuda() && is_raw(t) && bytes > 0 &&
      bytes / static_cast<uint64_t>(rows) <= (upload ? upload->buffer_bytes() : kChunk)) {
    std::optional<HostToDevice> own;
    return read_to_device(t, dst, upload ? *upload : own.emplace(dst.device(), kChunk), told);
  }
  // Through the staging buffer, whole rows (along dim 0) at a time, so that a chunk is a view
  // of dst whatever its strides (GPT-2's Conv1D weights arrive as a transposed view).
  if (bytes == 0 || rows == 0) return copy_(dst, Tensor::empty(t.shape, {t.dtype, Device::cpu()}));
  const uint64_t row_bytes = bytes / static_cast<uint64_t>(rows);
  const int64_t per_chunk = static_cast<int64_t>(std::max<uint64_t>(1, kChunk / row_bytes));
  for (int64_t r = 0; r < rows; r += per_chunk) {
    const int64_t k = std::min(per_chunk, rows - r);
    const size_t n = static_cast<size_t>(k) * row_bytes;
    reserve(staging_, n);
    read_parallel(start + static_cast<uint64_t>(r) * row_bytes, staging_.data_ptr(), n);
    Shape shape = t.shape;
    if (!shape.empty()) shape[0] = k;
    Tensor src;
    if (is_raw(t)) {
      src = view_bytes(staging_, t.dtype, shape);
    } else {
      reserve(widened_, nbytes_of(shape, element_size(t.dtype)));
      src = view_bytes(widened_, t.dtype, shape);
      decode(t, static_cast<const uint8_t*>(staging_.data_ptr()), static_cast<size_t>(src.numel()), src.data_ptr());
    }
    const Tensor into = t.shape.empty() ? dst : dst.as_strided(shape, dst.strides(), dst.storage_offset() + r * dst.stride(0));
    if (into.device().is_cpu() && !t.shape.empty()) {
      convert_rows(into, src);
    } else {
      copy_(into, src);
    }
    told(n);
  }
}

void save_file(const TensorMap& tensors, const std::string& path, const Metadata& metadata) {
  header_json(tensors, metadata);  // validate before touching the disk
  io::write_file_atomic(path, [&](const io::ChunkWriter& w) { write_to(tensors, metadata, w); });
}

void write_file(io::FolderWriter& folder, const std::string& name, const TensorMap& tensors, const Metadata& metadata) {
  header_json(tensors, metadata);
  folder.write(name, [&](const io::ChunkWriter& w) { write_to(tensors, metadata, w); });
}

Loaded load_file_with_metadata(const std::string& path, Device device) {
  std::vector<uint8_t> bytes = io::read_file(path);
  return deserialize(bytes.data(), bytes.size(), path, device);
}

TensorMap load_file(const std::string& path, Device device) {
  return load_file_with_metadata(path, device).tensors;
}

}  // namespace tg::safetensors
