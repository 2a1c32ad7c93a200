// GGUF metadata values and the writer.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <iterator>
#include <set>

#include "core/error.h"
#include "io/detail/gguf_format.h"

namespace tg::gguf {
namespace {

using detail::padded;
using detail::scalar_bytes;

bool is_integer(ValueType t) {
  return t == ValueType::kUInt8 || t == ValueType::kInt8 || t == ValueType::kUInt16 || t == ValueType::kInt16 ||
         t == ValueType::kUInt32 || t == ValueType::kInt32 || t == ValueType::kUInt64 || t == ValueType::kInt64;
}
bool is_signed(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 || t == ValueType::kInt64;
}
// A value of `bytes` bytes read as signed: its sign bit extended.
int64_t sign_extended(uint64_t bits, size_t bytes) {
  const unsigned shift = 64 - 8 * static_cast<unsigned>(bytes);
  return static_cast<int64_t>(bits << shift) >> shift;
}

class Bytes {
 public:
  std::string out;
  void u32(uint32_t v) { raw(v, 4); }
  void u64(uint64_t v) { raw(v, 8); }
  void raw(uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  }
  void str(const std::string& s) {
    u64(s.size());
    out += s;
  }
  void value(const Value& v) {
    if (v.type() == ValueType::kString) return str(v.as_string("metadata value"));
    if (v.type() != ValueType::kArray) return raw(v.bits(), scalar_bytes(v.type()));
    u32(static_cast<uint32_t>(v.element_type()));
    const auto& items = v.items("metadata value");
    u64(items.size());
    for (const Value& e : items) value(e);
  }
};


}  // namespace

const char* type_name(ValueType type) {
  static const char* const names[] = {"uint8",  "int8", "uint16", "int16",  "uint32", "int32",  "float32",
                                      "bool",   "string", "array", "uint64", "int64", "float64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(names) ? names[i] : "unknown";
}

Value Value::of(ValueType type, uint64_t bits) {
  TG_CHECK(type != ValueType::kString && type != ValueType::kArray && static_cast<uint32_t>(type) <= 12, "gguf",
           "Value::of takes a number or bool type, got ", type_name(type));
  Value v;
  v.type_ = type;
  v.bits_ = scalar_bytes(type) == 8 ? bits : bits & ((uint64_t{1} << (8 * scalar_bytes(type))) - 1);
  return v;
}
Value Value::int32(int32_t v) { return of(ValueType::kInt32, static_cast<uint32_t>(v)); }
Value Value::float32(float v) { return of(ValueType::kFloat32, std::bit_cast<uint32_t>(v)); }
Value Value::string(std::string s) {
  Value v;
  v.type_ = ValueType::kString;
  v.text_ = std::move(s);
  return v;
}
Value Value::array(ValueType element, std::vector<Value> items) {
  TG_CHECK(element != ValueType::kArray, "gguf", "an array of arrays is not GGUF");
  for (const Value& e : items)
    TG_CHECK(e.type_ == element, "gguf", "an array of ", type_name(element), " holds a ", type_name(e.type_));
  Value v;
  v.type_ = ValueType::kArray;
  v.element_ = element;
  v.items_ = std::move(items);
  return v;
}
Value Value::strings(std::vector<std::string> items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (std::string& s : items) values.push_back(string(std::move(s)));
  return array(ValueType::kString, std::move(values));
}
Value Value::int32s(std::span<const int32_t> items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (int32_t i : items) values.push_back(int32(i));
  return array(ValueType::kInt32, std::move(values));
}
Value Value::float32s(std::span<const float> items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (float f : items) values.push_back(float32(f));
  return array(ValueType::kFloat32, std::move(values));
}

int64_t Value::as_int(const std::string& what) const {
  TG_CHECK(is_integer(type_), "gguf", what, " is a ", type_name(type_), ", wants an integer");
  if (is_signed(type_)) return sign_extended(bits_, scalar_bytes(type_));
  TG_CHECK(bits_ <= static_cast<uint64_t>(INT64_MAX), "gguf", what, " is ", bits_, ", past int64");
  return static_cast<int64_t>(bits_);
}
double Value::as_number(const std::string& what) const {
  if (type_ == ValueType::kFloat32) return std::bit_cast<float>(static_cast<uint32_t>(bits_));
  if (type_ == ValueType::kFloat64) return std::bit_cast<double>(bits_);
  if (type_ == ValueType::kUInt64) return static_cast<double>(bits_);
  TG_CHECK(is_integer(type_), "gguf", what, " is a ", type_name(type_), ", wants a number");
  return static_cast<double>(as_int(what));
}
bool Value::as_bool(const std::string& what) const {
  TG_CHECK(type_ == ValueType::kBool, "gguf", what, " is a ", type_name(type_), ", wants a bool");
  return bits_ != 0;
}
const std::string& Value::as_string(const std::string& what) const {
  TG_CHECK(type_ == ValueType::kString, "gguf", what, " is a ", type_name(type_), ", wants a string");
  return text_;
}
const std::vector<Value>& Value::items(const std::string& what) const {
  TG_CHECK(type_ == ValueType::kArray, "gguf", what, " is a ", type_name(type_), ", wants an array");
  return items_;
}

Metadata& Metadata::set(const std::string& key, Value value) {
  for (auto& [k, v] : entries_)
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  entries_.emplace_back(key, std::move(value));
  return *this;
}
const Value* Metadata::find(const std::string& key) const {
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}
const Value& Metadata::at(const std::string& key) const {
  const Value* v = find(key);
  TG_CHECK(v, "gguf", "no metadata key '", key, "'");
  return *v;
}
void Metadata::erase(const std::string& key) {
  std::erase_if(entries_, [&](const auto& e) { return e.first == key; });
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}
uint64_t TensorInfo::nbytes() const {
  TG_CHECK(!ne.empty(), "gguf", "tensor '", name, "' has no dims");
  uint64_t n = row_bytes(type, ne[0]);
  for (size_t i = 1; i < ne.size(); ++i) n *= static_cast<uint64_t>(ne[i]);
  return n;
}

void write_file(const std::string& path, const Metadata& metadata, const std::vector<TensorData>& tensors) {
  uint64_t alignment = kDefaultAlignment;
  if (const Value* a = metadata.find("general.alignment")) {
    const int64_t v = a->as_int("general.alignment");
    TG_CHECK(v > 0 && std::has_single_bit(static_cast<uint64_t>(v)), "gguf", "general.alignment ", v,
             " is not a power of two");
    alignment = static_cast<uint64_t>(v);
  }
  Bytes head;
  head.out = "GGUF";
  head.u32(3);
  head.u64(tensors.size());
  head.u64(metadata.entries().size());
  for (const auto& [key, value] : metadata.entries()) {
    head.str(key);
    head.u32(static_cast<uint32_t>(value.type()));
    head.value(value);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorData& t : tensors) {
    const TensorInfo& i = t.info;
    TG_CHECK(names.insert(i.name).second, "gguf", "tensor '", i.name, "' is written twice");
    TG_CHECK(!i.name.empty() && i.name.size() < 64, "gguf", "tensor name '", i.name, "' has ", i.name.size(),
             " bytes, wants 1 to 63 (llama.cpp's limit)");
    TG_CHECK(!i.ne.empty() && i.ne.size() <= 4, "gguf", "tensor '", i.name, "' has ", i.ne.size(), " dims, wants 1 to 4");
    for (int64_t d : i.ne) TG_CHECK(d >= 0, "gguf", "tensor '", i.name, "' has a negative dim: ", tg::detail::to_text(i.ne));
    head.str(i.name);
    head.u32(static_cast<uint32_t>(i.ne.size()));
    for (int64_t d : i.ne) head.u64(static_cast<uint64_t>(d));
    head.u32(static_cast<uint32_t>(i.type));
    head.u64(offset);
    offset = padded(offset + i.nbytes(), alignment);
  }
  head.out.resize(padded(head.out.size(), alignment), '\0');
  io::write_file_atomic(path, [&](const io::ChunkWriter& out) {
    out(head.out.data(), head.out.size());
    static const char zeros[256] = {};
    for (const TensorData& t : tensors) {
      const uint64_t want = t.info.nbytes();
      uint64_t got = 0;
      t.write([&](const void* data, size_t n) {
        got += n;
        TG_CHECK(got <= want, "gguf", "tensor '", t.info.name, "' wrote more than its ", want, " bytes");
        out(data, n);
      });
      TG_CHECK(got == want, "gguf", "tensor '", t.info.name, "' wrote ", got, " bytes, wants ", want);
      for (uint64_t pad = padded(want, alignment) - want; pad > 0;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof zeros));
        out(zeros, n);
        pad -= n;
      }
    }
  });
}

}  // namespace tg::gguf
