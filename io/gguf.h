// GGUF version 3, the file format of llama.cpp, Ollama and LM Studio (docs/gguf.md):
//   "GGUF", version (uint32), tensor count and metadata count (uint64)
//   metadata: key (string), value type (uint32), value   (strings: uint64 length + bytes;
//             arrays: element type, uint64 count, elements)
//   tensor infos: name, n_dims (uint32), ne[n_dims] (uint64, the fastest-varying first), type
//             (uint32), offset (uint64, from the data section, a multiple of the alignment)
//   padding to general.alignment (32 when absent), then the tensors' data, each padded so.
// Everything is little-endian. Writing streams each tensor through io::write_file_atomic (a
// failed or concurrent save never leaves a half file); reading checks an untrusted file before
// it allocates (every length, count and offset bounded by the file's size) and names the field
// that is wrong.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "io/file.h"

namespace tg::gguf {

// The metadata value types, numbered as the file numbers them.
enum class ValueType : uint32_t {
  kUInt8 = 0, kInt8 = 1, kUInt16 = 2, kInt16 = 3, kUInt32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7,
  kString = 8, kArray = 9, kUInt64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* type_name(ValueType type);  // "uint32", "string", ...

// One metadata value: a number or bool of its exact type, a string, or an array of one element
// type (GGUF has no arrays of arrays).
class Value {
 public:
  static Value of(ValueType type, uint64_t bits);  // a number or bool from its little-endian bits
  static Value uint8(uint8_t v) { return of(ValueType::kUInt8, v); }
  static Value int32(int32_t v);
  static Value uint32(uint32_t v) { return of(ValueType::kUInt32, v); }
  static Value uint64(uint64_t v) { return of(ValueType::kUInt64, v); }
  static Value float32(float v);
  static Value boolean(bool v) { return of(ValueType::kBool, v); }
  static Value string(std::string s);
  // tg::Error unless every item is of `element` type (an empty array may be of any).
  static Value array(ValueType element, std::vector<Value> items);
  static Value strings(std::vector<std::string> items);
  static Value int32s(std::span<const int32_t> items);
  static Value float32s(std::span<const float> items);

  ValueType type() const { return type_; }
  ValueType element_type() const { return element_; }  // arrays
  uint64_t bits() const { return bits_; }               // numbers and bools
  // Typed access; tg::Error naming `what` and the value's type when it is another one.
  int64_t as_int(const std::string& what) const;       // any integer type that holds the value
  double as_number(const std::string& what) const;     // integers and floats
  bool as_bool(const std::string& what) const;
  const std::string& as_string(const std::string& what) const;
  const std::vector<Value>& items(const std::string& what) const;  // arrays
  bool operator==(const Value& o) const = default;

 private:
  ValueType type_ = ValueType::kUInt8, element_ = ValueType::kUInt8;
  uint64_t bits_ = 0;
  std::string text_;
  std::vector<Value> items_;
};

// Metadata in the order it is written; keys are unique.
class Metadata {
 public:
  Metadata& set(const std::string& key, Value value);  // replaces or appends; returns *this
  const Value* find(const std::string& key) const;
  const Value& at(const std::string& key) const;  // tg::Error naming the key when absent
  void erase(const std::string& key);
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  bool operator==(const Metadata& o) const = default;

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

// The tensor types (ggml's numbering): those tapegrad writes and those llama-quantize writes
// most (Q4_0, Q4_K, Q6_K), so that the reader lists them; other types are a tg::Error naming them.
enum class TensorType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14, kBF16 = 30 };
const char* type_name(TensorType type);  // "F32", "Q8_0", ...
int64_t block_size(TensorType type);     // values a block holds (32 for Q8_0, 1 for F32)
int64_t block_bytes(TensorType type);     // bytes a block takes
// Bytes of a row of n values: tg::Error unless n is a whole number of blocks.
uint64_t row_bytes(TensorType type, int64_t n);

// Encodes n float32 values (a whole number of blocks) as `type` into dst, row_bytes(type, n)
// bytes: F16 and BF16 rounded to nearest even, Q8_0 as ggml's quantize_row_q8_0_ref (per 32
// values the scale d = absmax / 127 as fp16 and round(x * (1 / d)) as int8). F32, F16, BF16, Q8_0.
void encode(TensorType type, const float* src, int64_t n, uint8_t* dst);
// The other way (Q8_0: d * q).
void decode(TensorType type, const uint8_t* src, int64_t n, float* dst);

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] varies fastest (a [rows, cols] matrix is {cols, rows})
  TensorType type = TensorType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  int64_t numel() const;
  uint64_t nbytes() const;  // row_bytes(type, ne[0]) * the other dims
};

// A tensor to write: `write` is called once, in file order, and must hand the ChunkWriter
// exactly info.nbytes() bytes (the file is not written otherwise).
struct TensorData {
  TensorInfo info;  // offset is computed
  std::function<void(const io::ChunkWriter&)> write;
};

inline constexpr uint64_t kDefaultAlignment = 32;

// Writes `path` atomically (io/file.h): metadata in its order, then the tensors in theirs, at the
// alignment of metadata's general.alignment (a power of two; else 32). tg::Error before anything
// is written for duplicate tensor names, names over 63 bytes (llama.cpp's limit), 0 or more than
// 4 dims, negative dims or a row that is not whole blocks.
void write_file(const std::string& path, const Metadata& metadata, const std::vector<TensorData>& tensors);

struct Header {
  uint32_t version = 3;
  Metadata metadata;
  std::vector<TensorInfo> tensors;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_start = 0;  // the data section's offset in the file
};

// Reads bytes [offset, offset + n) of the source into `out`.
using RangeReader = std::function<void(uint64_t offset, void* out, size_t n)>;
// Reads and checks the header of a GGUF of `file_size` bytes; `source` names it in errors. Every
// string, array and count is bounded by the bytes left before it is allocated; versions 2 and 3
// are read; every tensor lies whole in the data section at an aligned offset, none overlapping.
Header read_header(const RangeReader& read, uint64_t file_size, const std::string& source);
Header parse_header(const uint8_t* data, size_t size, const std::string& source = "<bytes>");

// A GGUF file opened for reading its tensors.
class Reader {
 public:
  explicit Reader(const std::string& path);
  const Header& header() const { return header_; }
  const TensorInfo& tensor(const std::string& name) const;  // tg::Error naming it when absent
  std::vector<uint8_t> bytes(const TensorInfo& t) const;
  // The values as float32 (F32, F16, BF16, Q8_0), ggml order.
  std::vector<float> floats(const TensorInfo& t) const;

 private:
  io::File file_;
  Header header_;
};

}  // namespace tg::gguf
