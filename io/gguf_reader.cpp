// The GGUF reader: every length, count and offset of an untrusted file checked against the bytes
// that are left before anything is allocated for it.
#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include "core/error.h"
#include "io/detail/gguf_format.h"
#include "io/gguf.h"

namespace tg::gguf {
namespace {

using detail::padded;
using detail::scalar_bytes;

// Reads a source front to back through a buffer (metadata is many small values).
class Cursor {
 public:
  Cursor(const RangeReader& read, uint64_t size, const std::string& source) : read_(read), size_(size), source_(source) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  template <class... Args>
  [[noreturn]] void bad(const Args&... args) const {
    fail("gguf", "'", source_, "' at byte ", pos_, ": ", args...);
  }
  void take(void* out, uint64_t n, const char* what) {
    if (n > left()) bad(what, " needs ", n, " bytes, ", left(), " are left");
    auto* dst = static_cast<uint8_t*>(out);
    while (n > 0) {
      if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) fill();
      const uint64_t at = pos_ - buf_start_, m = std::min<uint64_t>(n, buf_.size() - at);
      std::memcpy(dst, buf_.data() + at, m);
      dst += m;
      pos_ += m;
      n -= m;
    }
  }
  uint64_t number(size_t bytes, const char* what) {
    uint8_t b[8];
    take(b, bytes, what);
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
    return v;
  }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(number(4, what)); }
  uint64_t u64(const char* what) { return number(8, what); }
  std::string str(const char* what) {
    const uint64_t n = u64(what);
    if (n > left()) bad(what, " has length ", n, ", only ", left(), " bytes are left");
    std::string s(static_cast<size_t>(n), '\0');
    take(s.data(), n, what);
    return s;
  }

 private:
  void fill() {
    buf_start_ = pos_;
    buf_.resize(static_cast<size_t>(std::min<uint64_t>(kBuffer, left())));
    read_(pos_, buf_.data(), buf_.size());
  }
  static constexpr uint64_t kBuffer = uint64_t{1} << 20;
  const RangeReader& read_;
  uint64_t size_, pos_ = 0, buf_start_ = 0;
  std::vector<uint8_t> buf_;
  const std::string& source_;
};

// The fewest bytes a value of type t takes in the file (a bound on how many can be left).
uint64_t min_bytes(ValueType t) {
  return t == ValueType::kString || t == ValueType::kArray ? 8 : scalar_bytes(t);
}

ValueType value_type(Cursor& c, const std::string& key) {
  const uint32_t t = c.u32("a value type");
  if (t > static_cast<uint32_t>(ValueType::kFloat64)) c.bad("metadata '", key, "' has value type ", t, ", wants 0 to 12");
  return static_cast<ValueType>(t);
}

Value read_value(Cursor& c, ValueType type, const std::string& key) {
  if (type == ValueType::kString) return Value::string(c.str("a string"));
  if (type != ValueType::kArray) {
    const uint64_t bits = c.number(scalar_bytes(type), "a number");
    if (type == ValueType::kBool && bits > 1) c.bad("metadata '", key, "' is a bool of value ", bits, ", wants 0 or 1");
    return Value::of(type, bits);
  }
  const ValueType element = value_type(c, key);
  if (element == ValueType::kArray) c.bad("metadata '", key, "' is an array of arrays, which GGUF does not have");
  const uint64_t n = c.u64("an array length");
  if (n > c.left() / min_bytes(element))
    c.bad("metadata '", key, "' has ", n, " ", type_name(element), " items, more than the ", c.left(), " bytes left hold");
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) items.push_back(read_value(c, element, key));
  return Value::array(element, std::move(items));
}

TensorType tensor_type(Cursor& c, const std::string& name) {
  const uint32_t t = c.u32("a tensor type");
  for (TensorType known : {TensorType::kF32, TensorType::kF16, TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0,
                           TensorType::kQ4_K, TensorType::kQ6_K})
    if (t == static_cast<uint32_t>(known)) return known;
  c.bad("tensor '", name, "' has type ", t, ", not one tapegrad reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)");
}

}  // namespace

Header read_header(const RangeReader& read, uint64_t file_size, const std::string& source) {
  Cursor c(read, file_size, source);
  char magic[4];
  c.take(magic, 4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) c.bad("the file does not begin with \"GGUF\": not a GGUF file");
  Header h;
  h.version = c.u32("the version");
  if (h.version != 2 && h.version != 3) c.bad("version ", h.version, ", wants 2 or 3");
  const uint64_t n_tensors = c.u64("the tensor count"), n_kv = c.u64("the metadata count");
  // A metadata entry takes at least 13 bytes (key length, type, a byte), a tensor info 32.
  if (n_kv > c.left() / 13) c.bad(n_kv, " metadata entries cannot fit the ", c.left(), " bytes left");
  std::set<std::string> keys;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str("a metadata key");
    if (!keys.insert(key).second) c.bad("metadata key '", key, "' appears twice");
    const ValueType type = value_type(c, key);
    h.metadata.set(key, read_value(c, type, key));
  }
  if (const Value* a = h.metadata.find("general.alignment")) {
    if (a->type() != ValueType::kUInt32 || a->bits() == 0 || !std::has_single_bit(a->bits()))
      c.bad("general.alignment is a ", type_name(a->type()), " ", a->bits(), ", wants a uint32 power of two");
    h.alignment = a->bits();
  }
  if (n_tensors > c.left() / 32) c.bad(n_tensors, " tensors cannot fit the ", c.left(), " bytes left");
  std::set<std::string> names;
  h.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.str("a tensor name");
    if (!names.insert(t.name).second) c.bad("tensor '", t.name, "' appears twice");
    const uint32_t n_dims = c.u32("n_dims");
    if (n_dims < 1 || n_dims > 4) c.bad("tensor '", t.name, "' has ", n_dims, " dims, wants 1 to 4");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.u64("a dim");
      if (ne > (uint64_t{1} << 62) || (ne != 0 && numel > (uint64_t{1} << 62) / ne))
        c.bad("tensor '", t.name, "' has dims past 2^62 elements");
      numel *= ne;
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    t.type = tensor_type(c, t.name);
    if (t.ne[0] % block_size(t.type) != 0)
      c.bad("tensor '", t.name, "' has rows of ", t.ne[0], " values, not whole ", type_name(t.type), " blocks of ",
            block_size(t.type));
    t.offset = c.u64("a tensor offset");
    if (t.offset % h.alignment != 0) c.bad("tensor '", t.name, "' has offset ", t.offset, ", not a multiple of ", h.alignment);
    h.tensors.push_back(std::move(t));
  }
  h.data_start = padded(c.pos(), h.alignment);
  const uint64_t data_size = file_size >= h.data_start ? file_size - h.data_start : 0;
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : h.tensors) {
    // nbytes <= numel * 4 <= 2^64: no overflow; offset <= 2^64 too, so compare without adding.
    const uint64_t n = t.nbytes();
    if (t.offset > data_size || n > data_size - t.offset)
      c.bad("tensor '", t.name, "' needs bytes [", t.offset, ", ", t.offset + n, ") of a data section of ", data_size);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->nbytes() > by_offset[i]->offset)
      c.bad("tensors '", by_offset[i - 1]->name, "' and '", by_offset[i]->name, "' overlap");
  return h;
}

Header parse_header(const uint8_t* data, size_t size, const std::string& source) {
  return read_header([&](uint64_t offset, void* out, size_t n) { std::memcpy(out, data + offset, n); }, size, source);
}

Reader::Reader(const std::string& path) : file_(io::File::open(path)) {
  header_ = read_header([this](uint64_t offset, void* out, size_t n) { file_.read_at(offset, out, n); }, file_.size(),
                        path);
}

const TensorInfo& Reader::tensor(const std::string& name) const {
  for (const TensorInfo& t : header_.tensors)
    if (t.name == name) return t;
  fail("gguf", "'", file_.path(), "' has no tensor '", name, "'");
}

std::vector<uint8_t> Reader::bytes(const TensorInfo& t) const {
  std::vector<uint8_t> out(static_cast<size_t>(t.nbytes()));
  file_.read_at(header_.data_start + t.offset, out.data(), out.size());
  return out;
}

std::vector<float> Reader::floats(const TensorInfo& t) const {
  const std::vector<uint8_t> raw = bytes(t);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  decode(t.type, raw.data(), t.numel(), out.data());
  return out;
}

}  // namespace tg::gguf
