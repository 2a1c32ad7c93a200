// safetensors reader/writer, the JSON it rests on, atomic writes and module checkpoints.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/factory.h"
#include "core/primitives.h"
#include "nn/state_dict.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/linear.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;
using safetensors::TensorMap;

std::vector<uint8_t> file_bytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<long>(header.size()));
  return out;
}

// The tg::Error message deserialize throws for these bytes ("" when it does not throw).
std::string load_error(const std::vector<uint8_t>& bytes) {
  try {
    safetensors::deserialize(bytes.data(), bytes.size(), "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_LOAD_ERROR(bytes, substring)                                           \
  do {                                                                                \
    std::string tg_msg = load_error(bytes);                                           \
    EXPECT_NE(tg_msg.find(substring), std::string::npos)                              \
        << "wanted an error containing \"" << (substring) << "\", got \"" << tg_msg << "\""; \
    EXPECT_NE(tg_msg.find("test.safetensors"), std::string::npos) << tg_msg;         \
  } while (0)

TensorMap every_dtype(Generator& gen) {
  TensorMap m;
  m["f64"] = randn({2, 3}, gen, {kFloat64});
  m["f32"] = randn({4}, gen);
  m["bf16"] = randn({3, 2}, gen, {kBFloat16});
  m["i64"] = from_vector<int64_t>({-1, 0, 1LL << 40, 7}, {2, 2});
  m["i32"] = from_vector<int32_t>({-5, 2147483647, 3});
  m["bool"] = from_vector<bool>({true, false, true});
  m["scalar"] = scalar_tensor(3.5);
  m["empty"] = zeros({0, 5});
  return m;
}

class SafetensorsTest : public testing::SeededTest {};

TEST_F(SafetensorsTest, RoundTripEveryDtypeBitwise) {
  TempDir dir;
  TensorMap in = every_dtype(gen);
  safetensors::save_file(in, dir / "all.safetensors", {{"format", "pt"}, {"note", "h\u00e9llo \"q\""}});
  safetensors::Loaded out = safetensors::load_file_with_metadata(dir / "all.safetensors");
  ASSERT_EQ(out.tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(out.tensors.count(name));
    EXPECT_EQ(out.tensors[name].dtype(), t.dtype());
    EXPECT_TENSOR_EQ(out.tensors[name], t);
  }
  EXPECT_EQ(out.metadata.at("format"), "pt");
  EXPECT_EQ(out.metadata.at("note"), "h\u00e9llo \"q\"");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1) << "a temporary file is left";
}

TEST_F(SafetensorsTest, WritesNonContiguousTensorsRowMajor) {
  Tensor t = randn({3, 4}, gen);
  Tensor tt = transpose(t, 0, 1);  // a strided view
  std::vector<uint8_t> bytes = safetensors::serialize({{"t", tt}});
  Tensor back = safetensors::deserialize(bytes.data(), bytes.size()).tensors.at("t");
  EXPECT_TENSOR_EQ(back, contiguous(tt));
}

TEST_F(SafetensorsTest, LayoutMatchesTheFormat) {
  TensorMap m{{"b", ones({2}, {kFloat32})}, {"a", zeros({3}, {kInt64})}};
  std::vector<uint8_t> bytes = safetensors::serialize(m, {{"k", "v"}});
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data area starts 8-byte aligned";
  ASSERT_EQ(bytes.size(), 8 + n + 3 * 8 + 2 * 4);
  json::Value h = json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n)));
  EXPECT_EQ(h.at("__metadata__").at("k").as_string(), "v");
  EXPECT_EQ(h.at("a").at("dtype").as_string(), "I64");
  EXPECT_EQ(h.at("a").at("shape").as_array()[0].as_int(), 3);
  // name order: "a" first at offset 0, then "b"
  EXPECT_EQ(h.at("a").at("data_offsets").as_array()[0].as_int(), 0);
  EXPECT_EQ(h.at("a").at("data_offsets").as_array()[1].as_int(), 24);
  EXPECT_EQ(h.at("b").at("data_offsets").as_array()[0].as_int(), 24);
  EXPECT_EQ(h.at("b").at("data_offsets").as_array()[1].as_int(), 32);
  float one;
  std::memcpy(&one, &bytes[8 + n + 24], 4);
  EXPECT_EQ(one, 1.0f);
}

TEST_F(SafetensorsTest, F16IsWidenedToFloat32) {
  // 1, -2, 65504 (largest half), 2^-24 (smallest subnormal), 0.5, +inf
  const uint16_t halves[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x3800, 0x7C00};
  std::vector<uint8_t> data;
  for (uint16_t h : halves) data.push_back(h & 0xFF), data.push_back(h >> 8);
  auto bytes = file_bytes(R"({"h":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})", data);
  Tensor t = safetensors::deserialize(bytes.data(), bytes.size()).tensors.at("h");
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  std::vector<float> v = t.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[2], 65504.0f);
  EXPECT_EQ(v[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(v[4], 0.5f);
  EXPECT_TRUE(std::isinf(v[5]) && v[5] > 0);
}

// ---- corrupt files: each refused with a tg::Error naming the file and the problem ----

const std::string kGoodEntry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::vector<uint8_t> kEight(8, 0);

TEST(SafetensorsCorrupt, Truncated) {
  EXPECT_LOAD_ERROR(std::vector<uint8_t>{}, "shorter than the 8-byte header length");
  EXPECT_LOAD_ERROR(std::vector<uint8_t>(5, 0), "shorter than the 8-byte header length");
  auto good = file_bytes("{" + kGoodEntry + "}", kEight);
  ASSERT_EQ(load_error(good), "");
  good.pop_back();  // one data byte short
  EXPECT_LOAD_ERROR(good, "outside the data area");
}

TEST(SafetensorsCorrupt, BadHeaderLength) {
  auto bytes = file_bytes("{" + kGoodEntry + "}", kEight);
  bytes[0] += 100;  // runs past the end
  EXPECT_LOAD_ERROR(bytes, "runs past the end of the file");
  bytes[7] = 0x7F;  // ~9e18
  EXPECT_LOAD_ERROR(bytes, "absurd");
  auto shorter = file_bytes("{" + kGoodEntry + "}", kEight);
  shorter[0] -= 1;  // the header loses its closing brace
  EXPECT_LOAD_ERROR(shorter, "invalid JSON header");
}

TEST(SafetensorsCorrupt, BadJson) {
  EXPECT_LOAD_ERROR(file_bytes("{\"a\":", {}), "invalid JSON header");
  EXPECT_LOAD_ERROR(file_bytes("not json", {}), "invalid JSON header");
  EXPECT_LOAD_ERROR(file_bytes("[1, 2]", {}), "wants an object");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a": 3})", {}), "must be an object with dtype, shape and data_offsets");
  EXPECT_LOAD_ERROR(file_bytes(R"({"__metadata__": {"k": 1}})", {}), "__metadata__ value of 'k' is not a string");
  EXPECT_LOAD_ERROR(file_bytes(std::string(1000, '['), {}), "invalid JSON header");  // deep nesting, no overflow
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", kEight),
                    "unknown dtype 'F17'");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", kEight),
                    "unsupported dtype 'I8'");
}

TEST(SafetensorsCorrupt, OffsetsOutsideTheData) {
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", kEight),
                    "outside the data area");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", kEight),
                    "data_offsets must be two integers >= 0");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", kEight),
                    "end before they begin");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kEight),
                    "data_offsets must be two integers");
}

TEST(SafetensorsCorrupt, OverlappingGapsAndUncoveredBytes) {
  std::vector<uint8_t> sixteen(16, 0);
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               sixteen),
                    "overlap tensor 'a'");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                               sixteen),
                    "bytes [4, 8) of the data area belong to no tensor");
  EXPECT_LOAD_ERROR(file_bytes("{" + kGoodEntry + "}", sixteen), "the data area is 16 bytes but the tensors cover 8");
  // out of order in the header is fine when the ranges tile the buffer
  EXPECT_EQ(load_error(file_bytes(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                                  R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                  sixteen)),
            "");
}

TEST(SafetensorsCorrupt, ShapeDisagreesWithBytes) {
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kEight),
                    "F32 [3] needs 3 x 4 bytes");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", kEight), "needs 2 x 8");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kEight),
                    "shape entries must be integers >= 0");
  EXPECT_LOAD_ERROR(file_bytes(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", kEight),
                    "shape entries must be integers >= 0");
  EXPECT_LOAD_ERROR(
      file_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})", kEight),
      "shape is too large");
}

TEST(SafetensorsCorrupt, DuplicateNames) {
  EXPECT_LOAD_ERROR(file_bytes("{" + kGoodEntry + "," + kGoodEntry + "}", kEight), "duplicate key \"a\"");
}

TEST(SafetensorsCorrupt, ErrorsNameTheFile) {
  TempDir dir;
  std::string path = dir / "broken.safetensors";
  std::ofstream(path) << "xx";
  try {
    safetensors::load_file(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  try {
    safetensors::load_file(dir / "missing.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos) << e.what();
  }
}

// Truncations at every length and byte corruptions at every position: the reader either
// succeeds or throws tg::Error; never anything else, never a crash.
TEST_F(SafetensorsTest, FuzzTruncationsAndFlipsOnlyThrowTgError) {
  TensorMap m{{"w", randn({3, 2}, gen)}, {"b", from_vector<int64_t>({1, 2})}, {"h", randn({2}, gen, {kBFloat16})}};
  const std::vector<uint8_t> good = safetensors::serialize(m, {{"format", "pt"}});
  int errors = 0, ok = 0;
  auto attempt = [&](const std::vector<uint8_t>& bytes, const std::string& what) {
    try {
      safetensors::deserialize(bytes.data(), bytes.size(), "fuzz");
      ++ok;
    } catch (const Error&) {
      ++errors;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": threw a non-tg::Error: " << e.what();
    } catch (...) {
      ADD_FAILURE() << what << ": threw a non-exception";
    }
  };
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(len));
    int before = errors;
    attempt(cut, "truncated to " + std::to_string(len));
    EXPECT_EQ(errors, before + 1) << "a file truncated to " << len << " of " << good.size() << " bytes was accepted";
  }
  const uint8_t replacements[] = {'{', '}', '"', ',', '9', '-', 0x00, 0xFF};
  for (size_t pos = 0; pos < good.size(); ++pos) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      std::vector<uint8_t> bad = good;
      bad[pos] ^= mask;
      attempt(bad, "flip at " + std::to_string(pos));
    }
    for (uint8_t r : replacements) {
      std::vector<uint8_t> bad = good;
      bad[pos] = r;
      attempt(bad, "byte " + std::to_string(r) + " at " + std::to_string(pos));
    }
  }
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> bad = good;
    std::vector<int64_t> r = randint(0, 1 << 30, {6}, gen).to_vector<int64_t>();
    for (int k = 0; k < 3; ++k) bad[static_cast<size_t>(r[2 * k]) % bad.size()] = static_cast<uint8_t>(r[2 * k + 1]);
    attempt(bad, "random corruption " + std::to_string(iter));
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(ok, 0) << "flips inside the data area are valid files";
}

// ---- atomic writes ----

TEST_F(SafetensorsTest, FailedSaveLeavesTheOldFileIntact) {
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  TensorMap old_tensors{{"w", randn({4, 4}, gen)}};
  safetensors::save_file(old_tensors, path);
  // The writer fails half way through: the old file is intact and no temporary file is left.
  EXPECT_THROW(io::write_file_atomic(path,
                                     [](const io::ChunkWriter& w) {
                                       w("partial", 7);
                                       fail("test", "simulated crash while writing");
                                     }),
               Error);
  EXPECT_TENSOR_EQ(safetensors::load_file(path).at("w"), old_tensors.at("w"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1) << "a temporary file is left";

  // An invalid tensor map is refused before the disk is touched.
  EXPECT_THROW(safetensors::save_file({{"w", Tensor()}}, path), Error);
  EXPECT_TENSOR_EQ(safetensors::load_file(path).at("w"), old_tensors.at("w"));
}

TEST_F(SafetensorsTest, SaveIntoReadOnlyDirectoryFailsCleanly) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  TensorMap old_tensors{{"w", randn({3}, gen)}};
  safetensors::save_file(old_tensors, path);
  fs::permissions(dir.str(), fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_THROW(safetensors::save_file({{"w", randn({3}, gen)}}, path), Error);
  fs::permissions(dir.str(), fs::perms::owner_all);
  EXPECT_TENSOR_EQ(safetensors::load_file(path).at("w"), old_tensors.at("w"));
}

TEST_F(SafetensorsTest, ModuleCheckpointRoundTrip) {
  TempDir dir;
  nn::Linear a(5, 3, true, gen), b(5, 3, true, gen);
  nn::save_state_dict(a, dir / "lin.safetensors");
  auto names = safetensors::load_file(dir / "lin.safetensors");
  EXPECT_EQ(names.size(), 2u);
  EXPECT_TRUE(names.count("weight") && names.count("bias"));
  nn::load_state_dict_file(b, dir / "lin.safetensors");
  EXPECT_TENSOR_EQ(b.weight, a.weight);
  EXPECT_TENSOR_EQ(b.bias, a.bias);
  nn::Linear c(5, 4, true, gen);
  try {
    nn::load_state_dict_file(c, dir / "lin.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lin.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shape mismatches (2)"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, DeviceTensorsCudaMatchesCpu) {
  TG_REQUIRE_CUDA();
  TempDir dir;
  TensorMap cpu = every_dtype(gen), gpu;
  for (const auto& [k, t] : cpu) gpu[k] = to(t, Device::cuda());
  safetensors::save_file(gpu, dir / "gpu.safetensors");
  TensorMap back = safetensors::load_file(dir / "gpu.safetensors", Device::cuda());
  for (const auto& [k, t] : cpu) {
    SCOPED_TRACE(k);
    EXPECT_TRUE(back.at(k).device().is_cuda());
    EXPECT_TENSOR_EQ(to(back.at(k), Device::cpu()), t);
  }
}

// ---- JSON ----

TEST(Json, ParsesAndWritesEveryKind) {
  json::Value v = json::parse(R"( {"n": null, "t": true, "f": false, "i": -42, "big": 9007199254740993,
      "d": 0.5, "e": 1e-3, "s": "a\"b\\c\n\u00e9\ud83d\ude00", "a": [1, [2, {}], []], "o": {"k": "v"}} )");
  EXPECT_TRUE(v.at("n").is_null());
  EXPECT_TRUE(v.at("t").as_bool());
  EXPECT_FALSE(v.at("f").as_bool());
  EXPECT_EQ(v.at("i").as_int(), -42);
  EXPECT_EQ(v.at("big").as_int(), 9007199254740993LL) << "integers stay exact";
  EXPECT_EQ(v.at("d").as_double(), 0.5);
  EXPECT_EQ(v.at("e").as_double(), 1e-3);
  EXPECT_EQ(v.at("s").as_string(), "a\"b\\c\n\u00e9\U0001F600");
  EXPECT_EQ(v.at("a").as_array()[1].as_array()[0].as_int(), 2);
  EXPECT_EQ(v.at("o").at("k").as_string(), "v");
  // dump -> parse is the identity
  json::Value back = json::parse(json::dump(v));
  EXPECT_EQ(json::dump(back), json::dump(v));
  EXPECT_EQ(json::dump(json::parse(json::dump(v, 2))), json::dump(v));
}

TEST(Json, WritesLikePython) {
  json::Value v = json::Value::object();
  v.set("r", 8).set("b", json::Value::array({"x", "y"})).set("a", 0.0).set("e", json::Value::array()).set("n", nullptr);
  // json.dumps(v, indent=2, sort_keys=True)
  EXPECT_EQ(json::dump(v, 2, true), "{\n  \"a\": 0.0,\n  \"b\": [\n    \"x\",\n    \"y\"\n  ],\n  \"e\": [],\n  "
                                    "\"n\": null,\n  \"r\": 8\n}");
  EXPECT_EQ(json::dump(v), R"({"r":8,"b":["x","y"],"a":0.0,"e":[],"n":null})");
  EXPECT_EQ(json::dump(json::Value("tab\tctl\x01")), "\"tab\\tctl\\u0001\"");
}

TEST(Json, RejectsBadInput) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "\"abc", "\"\\x\"", "tru", "{\"a\" 1}",
                          "[1] 2", "\"\\ud800\"", "1e999", "{\"a\":1,\"a\":2}", "\"ctl\x01\""}) {
    EXPECT_THROW(json::parse(bad), Error) << bad;
  }
  EXPECT_THROW(json::parse(std::string(100000, '[')), Error);
  EXPECT_THROW(json::parse("{}").at("missing"), Error);
  EXPECT_THROW(json::parse("\"s\"").as_int(), Error);
  EXPECT_THROW(json::parse("1.5").as_int(), Error);
}

}  // namespace
}  // namespace tg::test
