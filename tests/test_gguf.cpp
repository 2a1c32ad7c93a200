// io/gguf.h: the writer and the reader, Q8_0 as ggml's reference quantises, hostile files.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "io/detail/float16.h"
#include "io/file.h"
#include "io/gguf.h"
#include "test_support.h"

namespace tg {
namespace {

using gguf::TensorType;
using gguf::Value;
using gguf::ValueType;

gguf::TensorData floats_tensor(const std::string& name, std::vector<int64_t> ne, TensorType type,
                               std::vector<float> values) {
  gguf::TensorInfo info{.name = name, .ne = std::move(ne), .type = type};
  return {info, [values = std::move(values), type](const io::ChunkWriter& out) {
            std::vector<uint8_t> bytes(gguf::row_bytes(type, static_cast<int64_t>(values.size())));
            gguf::encode(type, values.data(), static_cast<int64_t>(values.size()), bytes.data());
            out(bytes.data(), bytes.size());
          }};
}

std::vector<uint8_t> file_bytes(const std::string& path) { return io::read_file(path); }

TEST(Gguf, MetadataOfEveryTypeRoundTrips) {
  test::TempDir dir;
  gguf::Metadata m;
  m.set("u8", Value::uint8(200)).set("i8", Value::of(ValueType::kInt8, static_cast<uint8_t>(-5)));
  m.set("u16", Value::of(ValueType::kUInt16, 60000)).set("i16", Value::of(ValueType::kInt16, static_cast<uint16_t>(-300)));
  m.set("u32", Value::uint32(4000000000u)).set("i32", Value::int32(-7)).set("f32", Value::float32(0.25f));
  m.set("bool", Value::boolean(true)).set("str", Value::string("h\xC3\xA9llo"));
  m.set("u64", Value::uint64(uint64_t{1} << 40)).set("i64", Value::of(ValueType::kInt64, static_cast<uint64_t>(-9)));
  m.set("f64", Value::of(ValueType::kFloat64, std::bit_cast<uint64_t>(1e-300)));
  m.set("strings", Value::strings({"a", "", "b c"})).set("ints", Value::int32s(std::vector<int32_t>{1, -2, 3}));
  m.set("empty", Value::array(ValueType::kFloat32, {}));
  gguf::write_file(dir / "m.gguf", m, {floats_tensor("t", {2, 3}, TensorType::kF32, {1, 2, 3, 4, 5, 6})});

  const gguf::Reader r(dir / "m.gguf");
  EXPECT_EQ(r.header().metadata, m);
  EXPECT_EQ(r.header().metadata.at("i8").as_int("i8"), -5);
  EXPECT_EQ(r.header().metadata.at("i16").as_int("i16"), -300);
  EXPECT_EQ(r.header().metadata.at("i64").as_int("i64"), -9);
  EXPECT_EQ(r.header().metadata.at("f64").as_number("f64"), 1e-300);
  EXPECT_EQ(r.header().metadata.at("f32").as_number("f32"), 0.25);
  EXPECT_EQ(r.header().metadata.at("strings").items("strings")[2].as_string("s"), "b c");
  const gguf::TensorInfo& t = r.tensor("t");
  EXPECT_EQ(t.ne, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.floats(t), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(r.header().data_start % 32, 0u);
}

TEST(Gguf, TensorsAreAlignedToGeneralAlignment) {
  test::TempDir dir;
  gguf::Metadata m;
  m.set("general.alignment", Value::uint32(64));
  gguf::write_file(dir / "a.gguf", m,
                   {floats_tensor("a", {3}, TensorType::kF32, {1, 2, 3}), floats_tensor("b", {2}, TensorType::kF16, {5, 6})});
  const gguf::Reader r(dir / "a.gguf");
  EXPECT_EQ(r.header().alignment, 64u);
  EXPECT_EQ(r.header().data_start % 64, 0u);
  EXPECT_EQ(r.tensor("b").offset, 64u);  // a's 12 bytes padded to 64
  EXPECT_EQ(r.floats(r.tensor("b")), (std::vector<float>{5, 6}));
  EXPECT_EQ(file_bytes(dir / "a.gguf").size(), r.header().data_start + 128);
}

// The header bytes as the spec lays them out, for one metadata entry and one tensor.
TEST(Gguf, LayoutIsTheSpecs) {
  test::TempDir dir;
  gguf::Metadata m;
  m.set("k", Value::uint32(7));
  gguf::write_file(dir / "l.gguf", m, {floats_tensor("w", {2}, TensorType::kF32, {1.5f, -2})});
  const std::vector<uint8_t> b = file_bytes(dir / "l.gguf");
  const uint8_t head[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                          1, 0, 0, 0, 0, 0, 0, 0, 'k', 4, 0, 0, 0, 7, 0, 0, 0,  // "k": uint32 7
                          1, 0, 0, 0, 0, 0, 0, 0, 'w', 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,  // "w": 1 dim of 2
                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // F32, offset 0
  ASSERT_GE(b.size(), sizeof head);
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.begin() + sizeof head), std::vector<uint8_t>(head, head + sizeof head));
  float w[2];
  std::memcpy(w, b.data() + 96, sizeof w);  // the header padded to 96
  EXPECT_EQ(w[0], 1.5f);
  EXPECT_EQ(w[1], -2.0f);
}

// ggml's quantize_row_q8_0_ref: d = absmax / 127 stored as fp16, q = roundf(x * (1 / d)).
TEST(Gguf, Q8_0IsGgmlsReferenceQuantisation) {
  std::vector<float> x(64);
  for (int i = 0; i < 32; ++i) x[i] = (i - 15.5f) * 0.37f;  // a block with its max at -5.735
  for (int i = 32; i < 64; ++i) x[i] = 0;                    // an all-zero block: d 0, q 0
  std::vector<uint8_t> q(gguf::row_bytes(TensorType::kQ8_0, 64));
  gguf::encode(TensorType::kQ8_0, x.data(), 64, q.data());
  ASSERT_EQ(q.size(), 68u);
  const float amax = 15.5f * 0.37f, d = amax / 127.0f, id = 1.0f / d;
  EXPECT_EQ(q[0] | (q[1] << 8), io::detail::float_to_half(d));
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(static_cast<int8_t>(q[2 + i]), static_cast<int8_t>(std::round(x[i] * id))) << i;
  EXPECT_EQ(static_cast<int8_t>(q[2]), -127);
  for (int i = 34; i < 68; ++i) EXPECT_EQ(q[i], 0) << i;
  // Ties round away from zero (roundf), not to even: 2.5 -> 3, -2.5 -> -3.
  std::vector<float> ties(32, 0);
  ties[0] = 127, ties[1] = 2.5f, ties[2] = -2.5f, ties[3] = 0.5f;
  gguf::encode(TensorType::kQ8_0, ties.data(), 32, q.data());
  EXPECT_EQ(static_cast<int8_t>(q[3]), 3);
  EXPECT_EQ(static_cast<int8_t>(q[4]), -3);
  EXPECT_EQ(static_cast<int8_t>(q[5]), 1);
  std::vector<float> back(32);
  gguf::decode(TensorType::kQ8_0, q.data(), 32, back.data());
  EXPECT_EQ(back[0], 127.0f);
  EXPECT_EQ(back[1], 3.0f);
  ties[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_ERROR_HAS(gguf::encode(TensorType::kQ8_0, ties.data(), 32, q.data()), "Q8_0 cannot encode", "value 7");
  EXPECT_ERROR_HAS(gguf::encode(TensorType::kQ8_0, ties.data(), 30, q.data()), "30 values", "Q8_0 blocks of 32");
}

TEST(Gguf, HalfRoundsToNearestEven) {
  using io::detail::float_to_half;
  using io::detail::half_to_float;
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // the tie past the largest half: infinity
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3C00);  // halfway to the next half: to even
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3C02);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // half of it: a tie to even zero
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x7C00; ++h)  // every finite half survives the trip
    ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << h;
}

TEST(Gguf, WriterRefusesWhatLlamaCppCannotRead) {
  test::TempDir dir;
  const gguf::Metadata m;
  EXPECT_ERROR_HAS(gguf::write_file(dir / "x.gguf", m,
                                    {floats_tensor("t", {1}, TensorType::kF32, {1}), floats_tensor("t", {1}, TensorType::kF32, {1})}),
                   "'t' is written twice");
  EXPECT_ERROR_HAS(gguf::write_file(dir / "x.gguf", m, {floats_tensor(std::string(64, 'n'), {1}, TensorType::kF32, {1})}),
                   "64 bytes", "1 to 63");
  gguf::TensorData short_one = floats_tensor("t", {4}, TensorType::kF32, {1, 2});
  EXPECT_ERROR_HAS(gguf::write_file(dir / "x.gguf", m, {short_one}), "'t' wrote 8 bytes, wants 16");
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
  gguf::Metadata bad_alignment;
  bad_alignment.set("general.alignment", Value::uint32(48));
  EXPECT_ERROR_HAS(gguf::write_file(dir / "x.gguf", bad_alignment, {}), "general.alignment 48", "power of two");
  EXPECT_ERROR_HAS(Value::array(ValueType::kUInt32, {Value::int32(1)}), "array of uint32 holds a int32");
}

// A valid file to break: one key, one F32 tensor of 2 values.
std::vector<uint8_t> valid_file(const test::TempDir& dir) {
  gguf::Metadata m;
  m.set("k", Value::strings({"x"}));
  gguf::write_file(dir / "v.gguf", m, {floats_tensor("w", {2}, TensorType::kF32, {1, 2})});
  return file_bytes(dir / "v.gguf");
}

TEST(Gguf, ReaderNamesWhatIsWrongInAHostileFile) {
  test::TempDir dir;
  const std::vector<uint8_t> ok = valid_file(dir);
  EXPECT_NO_THROW(gguf::parse_header(ok.data(), ok.size()));
  auto error_with = [&](size_t at, uint64_t v, size_t bytes = 8) {
    std::vector<uint8_t> b = ok;
    for (size_t i = 0; i < bytes; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
    return test::error_of([&] { gguf::parse_header(b.data(), b.size()); });
  };
  // Offsets: magic 0, version 4, tensors 8, kv 16, key length 24, key 32, type 33, element type 37,
  // count 41, string length 49, 'x' 57, tensor name length 58.
  EXPECT_NE(error_with(0, 'X', 1).find("not a GGUF file"), std::string::npos);
  EXPECT_NE(error_with(4, 1, 4).find("version 1, wants 2 or 3"), std::string::npos);
  EXPECT_NE(error_with(8, uint64_t{1} << 60).find("tensors cannot fit"), std::string::npos);
  EXPECT_NE(error_with(16, uint64_t{1} << 60).find("metadata entries cannot fit"), std::string::npos);
  EXPECT_NE(error_with(24, uint64_t{1} << 62).find("has length 4611686018427387904"), std::string::npos);
  EXPECT_NE(error_with(33, 13, 4).find("value type 13"), std::string::npos);
  EXPECT_NE(error_with(37, 9, 4).find("array of arrays"), std::string::npos);
  EXPECT_NE(error_with(41, uint64_t{1} << 40).find("more than the"), std::string::npos);
  const size_t dims = 58 + 8 + 1 + 4, type = dims + 8, offset = type + 4;
  EXPECT_NE(error_with(58 + 8 + 1, 5, 4).find("5 dims, wants 1 to 4"), std::string::npos);
  EXPECT_NE(error_with(dims, uint64_t{1} << 63).find("past 2^62"), std::string::npos);
  EXPECT_NE(error_with(type, 99, 4).find("type 99"), std::string::npos);
  EXPECT_NE(error_with(type, 8, 4).find("not whole Q8_0 blocks"), std::string::npos);
  EXPECT_NE(error_with(offset, 4).find("not a multiple of 32"), std::string::npos);
  EXPECT_NE(error_with(offset, 32).find("of a data section of 32"), std::string::npos);
  EXPECT_NE(error_with(dims, 9).find("needs bytes [0, 36)"), std::string::npos);
  for (size_t cut = 0; cut < 96 + 8; cut += 3)  // every cut before the last tensor's end is an error
    EXPECT_FALSE(test::error_of([&] { gguf::parse_header(ok.data(), cut); }).empty()) << cut;
}

}  // namespace
}  // namespace tg
