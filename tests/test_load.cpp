// from_pretrained's streaming load (issue 34): safetensors::FileReader reads each tensor of a file
// straight into a tensor of any dtype and strides, bitwise what deserialize gives, with the same
// errors; and a model folder loads in about the model's own host memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/primitives.h"
#include "examples/common/precision.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/init.h"
#include "nn/models/gpt2.h"
#include "nn/models/llama.h"
#include "nn/models/pretrained.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;
using safetensors::TensorMap;

class LoadTest : public testing::SeededTest {};

// A safetensors file of these bytes (header padded with nothing).
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  io::write_file_atomic(path, file + header + data);
}

// Each tensor of `path` read by FileReader into its own dtype, into float64 (floating point
// ones), and into a transposed view (2-D ones), against deserialize's tensor.
void expect_reads_as_deserialize(const TempDir& dir, const std::string& name) {
  const TensorMap want = safetensors::load_file(dir / name);
  io::Folder folder(dir.str());
  safetensors::FileReader reader(folder.open(name));
  ASSERT_EQ(reader.header().tensors.size(), want.size());
  NoGradGuard no_grad;
  for (const safetensors::TensorInfo& t : reader.header().tensors) {
    SCOPED_TRACE(t.name);
    const Tensor& w = want.at(t.name);
    Tensor same = Tensor::empty(t.shape, {t.dtype});
    reader.read(t, same);
    EXPECT_TENSOR_EQ(same, w);
    if (is_floating_point(t.dtype)) {
      Tensor wide = Tensor::empty(t.shape, {kFloat64});
      reader.read(t, wide);
      EXPECT_TENSOR_EQ(wide, to(w, kFloat64));
    }
    if (t.shape.size() == 2) {
      Tensor base = Tensor::empty({t.shape[1], t.shape[0]}, {t.dtype});
      reader.read(t, transpose(base, 0, 1));
      EXPECT_TENSOR_EQ(contiguous(transpose(base, 0, 1)), w);
    }
  }
}

TEST_F(LoadTest, FileReaderReadsEveryDtypeIntoAnyTensor) {
  TempDir dir;
  TensorMap m;
  m["f64"] = randn({2, 3}, gen, {kFloat64});
  m["f32"] = randn({4}, gen);
  m["bf16"] = randn({3, 2}, gen, {kBFloat16});
  m["i64"] = from_vector<int64_t>({-1, 0, 1LL << 40, 7}, {2, 2});
  m["i32"] = from_vector<int32_t>({-5, 2147483647, 3});
  m["bool"] = from_vector<bool>({true, false, true});
  m["scalar"] = scalar_tensor(3.5);
  m["empty"] = zeros({0, 5});
  safetensors::save_file(m, dir / "all.safetensors");
  expect_reads_as_deserialize(dir, "all.safetensors");

  // F16 (1, -2, 0.5, 65504, a subnormal, -0) and BOOL bytes other than 0 and 1: decoded on the way.
  write_raw(dir / "f16.safetensors",
            R"({"h":{"dtype":"F16","shape":[3,2],"data_offsets":[0,12]},)"
            R"("b":{"dtype":"BOOL","shape":[3],"data_offsets":[12,15]}})",
            std::string("\x00\x3c\x00\xc0\x00\x38\xff\x7b\x01\x00\x00\x80", 12) + std::string("\x00\x02\x01", 3));
  expect_reads_as_deserialize(dir, "f16.safetensors");
  EXPECT_EQ(safetensors::load_file(dir / "f16.safetensors").at("h").to_vector<float>(),
            (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f, 0x1p-24f, -0.0f}));
}

TEST_F(LoadTest, TensorsLargerThanAChunkArriveWhole) {
  // 69 MB: more than one of the reader's 64 MiB chunks (staged) and many of its 8 MiB pieces (direct).
  TempDir dir;
  const Tensor big = add(randn({2100, 1}, gen), randn({1, 8192}, gen));  // every row its own
  safetensors::save_file({{"big", big}}, dir / "big.safetensors");
  io::Folder folder(dir.str());
  safetensors::FileReader reader(folder.open("big.safetensors"));
  const safetensors::TensorInfo& t = reader.header().tensors.at(0);
  size_t told = 0;
  Tensor same = Tensor::empty(t.shape);
  reader.read(t, same, [&](size_t n) { told += n; });
  EXPECT_EQ(told, big.nbytes());
  EXPECT_TENSOR_EQ(same, big);
  Tensor narrow = Tensor::empty(t.shape, {kBFloat16});
  told = 0;
  reader.read(t, narrow, [&](size_t n) { told += n; });
  EXPECT_EQ(told, big.nbytes());
  EXPECT_TENSOR_EQ(narrow, to(big, kBFloat16));
  Tensor base = Tensor::empty({8192, 2100});
  reader.read(t, transpose(base, 0, 1));
  EXPECT_TENSOR_EQ(transpose(base, 0, 1), big);
}

TEST_F(LoadTest, ReadsToTheGpuThroughPinnedBuffersInTurn) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device";
  // 2100 rows of 32 KiB through 1 MiB buffers: many chunks, each buffer refilled while the other's
  // copy may still run; into the same dtype (straight), another (converted on the device) and a
  // transposed view.
  TempDir dir;
  const Tensor big = add(randn({2100, 1}, gen), randn({1, 8192}, gen));
  safetensors::save_file({{"big", big}}, dir / "big.safetensors");
  io::Folder folder(dir.str());
  safetensors::FileReader reader(folder.open("big.safetensors"));
  const safetensors::TensorInfo& t = reader.header().tensors.at(0);
  HostToDevice upload(Device::cuda(), 1 << 20);
  size_t told = 0;
  Tensor same = Tensor::empty(t.shape, {kFloat32, Device::cuda()});
  reader.read(t, same, [&](size_t n) { told += n; }, &upload);
  EXPECT_EQ(told, big.nbytes());
  EXPECT_TENSOR_EQ(to(same, Device::cpu()), big);
  Tensor narrow = Tensor::empty(t.shape, {kBFloat16, Device::cuda()});
  reader.read(t, narrow, {}, &upload);
  EXPECT_TENSOR_EQ(to(narrow, Device::cpu()), to(big, kBFloat16));
  Tensor base = Tensor::empty({8192, 2100}, {kFloat32, Device::cuda()});
  reader.read(t, transpose(base, 0, 1), {}, &upload);
  EXPECT_TENSOR_EQ(to(transpose(base, 0, 1), Device::cpu()), big);
  // A row wider than the buffers goes through the host staging instead.
  HostToDevice small(Device::cuda(), 4096);
  reader.read(t, same, {}, &small);
  EXPECT_TENSOR_EQ(to(same, Device::cpu()), big);
}

TEST_F(LoadTest, FileReaderErrorsAreDeserializesAndNameTheFile) {
  TempDir dir;
  // A corrupt header: the same message as deserialize's, naming the file.
  write_raw(dir / "bad.safetensors",
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            std::string(8, '\0'));
  io::Folder folder(dir.str());
  const std::string got = error_of([&] { safetensors::FileReader(folder.open("bad.safetensors")); });
  const std::vector<uint8_t> bytes = io::read_file(dir / "bad.safetensors");
  EXPECT_EQ(got, error_of([&] { safetensors::deserialize(bytes.data(), bytes.size(), dir / "bad.safetensors"); }));
  EXPECT_NE(got.find("overlap tensor 'a'"), std::string::npos) << got;
  EXPECT_ERROR_HAS(folder.open("missing.safetensors"), "cannot open", "missing.safetensors");
  EXPECT_ERROR_HAS(HostToDevice(Device::cpu(), 1 << 20), "HostToDevice", "streams to a GPU");

  safetensors::save_file({{"w", randn({4, 3}, gen)}}, dir / "w.safetensors");
  safetensors::FileReader reader(folder.open("w.safetensors"));
  const safetensors::TensorInfo& t = reader.header().tensors.at(0);
  EXPECT_ERROR_HAS(reader.read(t, Tensor::empty({3, 4})), "w.safetensors", "tensor 'w' is [4, 3]",
                   "read into a tensor of shape [3, 4]");
  fs::resize_file(dir / "w.safetensors", fs::file_size(dir / "w.safetensors") - 4);  // after the header was read
  EXPECT_ERROR_HAS(reader.read(t, Tensor::empty({4, 3})), "w.safetensors", "truncated");
}

// Grouped-query heads, two layers, float32.
nn::LlamaConfig small_llama() {
  nn::LlamaConfig l;
  l.vocab_size = 64;
  l.hidden_size = 32;
  l.intermediate_size = 48;
  l.num_hidden_layers = 2;
  l.num_attention_heads = 4;
  l.num_key_value_heads = 2;
  l.max_position_embeddings = 16;
  return l;
}

TEST_F(LoadTest, LoadsToTheGpuAsToTheCpu) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device";
  // bf16 and f32 files into bf16 and f32 parameters, and GPT-2's transposed Conv1D weights.
  nn::GPT2Config g;
  g.vocab_size = 72;
  g.n_positions = 16;
  g.n_embd = 32;
  g.n_layer = 2;
  g.n_head = 4;
  const nn::LlamaConfig l = small_llama();
  TempDir dir;
  nn::GPT2LMHeadModel gpt(g, gen);
  nn::save_pretrained(gpt, dir / "g");
  nn::LlamaForCausalLM llama(l, gen);
  llama.to(kBFloat16);
  nn::save_pretrained(llama, dir / "l");
  for (const std::string name : {"g", "l"})
    for (DType dtype : {kFloat32, kBFloat16}) {
      SCOPED_TRACE(name + " into " + dtype_name(dtype));
      auto cpu = nn::from_pretrained(dir / name, {.dtype = dtype});
      auto gpu = nn::from_pretrained(dir / name, {.dtype = dtype, .device = Device::cuda()});
      const nn::StateDict want = cpu->state_dict();
      for (const auto& [key, t] : gpu->state_dict()) EXPECT_TENSOR_EQ(to(t, Device::cpu()), want.at(key)) << key;
    }
}

// A field of /proc/self/status in bytes ("VmHWM", "VmRSS"); -1 where there is none.
int64_t status_bytes(const std::string& field) {
  const std::optional<int64_t> kib = examples::proc_status_kib(field);
  return kib ? *kib * 1024 : -1;
}

// Resets VmHWM to the current RSS; false where the kernel does not allow it.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

TEST_F(LoadTest, AFolderLoadsInTheModelsMemoryPlusAShard) {
  // A 0.6 GB bfloat16 Llama in one file. Reading the file whole, deserialising it and copying
  // into the model (as before streaming) peaks at three times that, over the bound below.
  nn::LlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = 1024;
  c.intermediate_size = 4096;
  c.num_hidden_layers = 14;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 4;
  c.max_position_embeddings = 64;
  TempDir dir;
  const std::string m = dir / "m";
  std::map<std::string, float> values;  // each parameter filled with its own constant
  int64_t model_bytes = 0;
  {
    std::shared_ptr<nn::LlamaForCausalLM> model;
    {
      nn::init::SkipInitGuard no_init({kBFloat16, Device::cpu()});
      model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
    }
    NoGradGuard no_grad;
    for (const auto& [name, p] : model->named_parameters()) {
      values[name] = static_cast<float>(values.size() + 1) / 64.0f;  // exact in bfloat16
      fill_(p, values[name]);
      model_bytes += static_cast<int64_t>(p.nbytes());
    }
    nn::save_pretrained(*model, m);
  }
  ASSERT_GT(model_bytes, 500'000'000);
  empty_cache(Device::cpu());
  const auto shard = static_cast<int64_t>(fs::file_size(m + "/model.safetensors"));

  reset_peak_memory_stats();
  const size_t in_use = memory_stats().bytes_in_use;
  const bool reset = reset_peak_rss();
  const int64_t rss_before = status_bytes("VmRSS");
  auto model = nn::from_pretrained_llama(m, {.dtype = kBFloat16, .quiet = true});
  const int64_t rss_peak = status_bytes("VmHWM");
  const size_t tensors_peak = memory_stats().peak_bytes - in_use;

  // The tensors the load allocated: at most the model's (made, then given the copied file's memory), no staging.
  EXPECT_LE(tensors_peak, static_cast<size_t>(model_bytes) + (1 << 20));
  NoGradGuard no_grad;
  for (const auto& [name, p] : model->named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(max(p).item<float>(), values.at(name));
    EXPECT_EQ(max(neg(p)).item<float>(), -values.at(name));
  }
  if (!reset) GTEST_SKIP() << "/proc/self/clear_refs refused: the process's peak RSS is not the load's";
  constexpr int64_t kSlack = 256 << 20;
  EXPECT_LE(rss_peak - rss_before, model_bytes + shard + kSlack)
      << "peak RSS " << rss_peak << " bytes, " << rss_before << " before the load; model " << model_bytes;
}

// On the host in the files' dtype the parameters take memory the kernel copied the files' tensors
// into (none of the allocator's), with the values a converting load gives, and the files are not
// read again: rewriting them in place, or truncating them, while the model lives changes nothing
// (issue 47: a mapping of the files followed them, and faulted once they were cut).
TEST_F(LoadTest, AHostLoadInTheFilesDtypeOwnsItsMemory) {
  nn::LlamaConfig c = small_llama();
  c.tie_word_embeddings = true;
  TempDir dir;
  nn::LlamaForCausalLM made(c, gen);
  made.to(kBFloat16);
  nn::save_pretrained(made, dir / "m", {.max_shard_bytes = 20000});  // several shards
  empty_cache(Device::cpu());
  const size_t in_use = memory_stats().bytes_in_use;
  auto model = nn::from_pretrained_llama(dir / "m", {.dtype = kBFloat16});
  int64_t model_bytes = 0;
  for (const auto& [name, p] : model->named_parameters()) model_bytes += static_cast<int64_t>(p.nbytes());
  EXPECT_LT(memory_stats().bytes_in_use - in_use, static_cast<size_t>(model_bytes) / 4) << "the buffers only";
  auto copied = nn::from_pretrained_llama(dir / "m");  // float32: read and converted
  for (const auto& [name, p] : model->named_parameters())
    EXPECT_TENSOR_EQ(to(copied->get_parameter(name), kBFloat16), p) << name;
  EXPECT_TRUE(model->lm_head->weight.same(model->model->embed_tokens->weight));

  const Tensor ids = from_vector(std::vector<int64_t>{1, 5, 9, 2}, {1, 4});
  const Tensor logits = model->forward(ids);
  for (const auto& e : fs::directory_iterator(dir / "m")) {
    if (e.path().extension() != ".safetensors") continue;
    const auto bytes = static_cast<size_t>(fs::file_size(e.path()));
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);  // in place: no truncation
    f.write(std::string(bytes, '\x7f').data(), static_cast<std::streamsize>(bytes));
  }
  EXPECT_TENSOR_EQ(model->forward(ids), logits);
  EXPECT_TENSOR_EQ((*model->model->layers)[1].mlp->up_proj->weight,
                   to((*copied->model->layers)[1].mlp->up_proj->weight, kBFloat16));
  for (const auto& e : fs::directory_iterator(dir / "m"))
    if (e.path().extension() == ".safetensors") fs::resize_file(e.path(), 0);
  EXPECT_TENSOR_EQ(model->forward(ids), logits);

  // Writes stay the model's; a save over the folder (files replaced) leaves it as it was.
  nn::save_pretrained(made, dir / "m");
  NoGradGuard no_grad;
  const Tensor w = (*model->model->layers)[0].self_attn->q_proj->weight;
  const Tensor before = clone(w);
  fill_(w, 0.5);
  EXPECT_TENSOR_EQ(nn::from_pretrained_llama(dir / "m", {.dtype = kBFloat16})->get_parameter(
                       "model.layers.0.self_attn.q_proj.weight"),
                   before);
  nn::save_pretrained(*model, dir / "m");
  EXPECT_TENSOR_EQ((*model->model->layers)[0].self_attn->k_proj->weight,
                   to((*copied->model->layers)[0].self_attn->k_proj->weight, kBFloat16));
  EXPECT_EQ(max(nn::from_pretrained_llama(dir / "m", {.dtype = kBFloat16})->get_parameter(
                    "model.layers.0.self_attn.q_proj.weight"))
                .item<float>(),
            0.5f);
}

}  // namespace
}  // namespace tg::test
