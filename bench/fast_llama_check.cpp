// bench/real_llama.h's fast_llama against LlamaForCausalLM's constructor, on the CPU: the same
// module tree (str()), parameters and buffers (names, shapes, dtypes, requires_grad), and, once
// given the constructor's weights, bitwise the same loss and gradients. Plain, grouped-query and
// tied configs, float32 and bfloat16. Exit 1 with the first difference (ctest
// Bench.FastLlamaMatchesTheConstructor).
#include <iostream>
#include <string>

#include "bench/real_llama.h"
#include "nn/models/llama.h"
#include "tapegrad.h"

using namespace tg;

namespace {

void same_tensors(const nn::NamedTensors& want, const nn::NamedTensors& got, const std::string& what) {
  TG_CHECK(want.size() == got.size(), "fast_llama_check", what, ": ", got.size(), " tensors, wanted ", want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [wn, w] = want[i];
    const auto& [gn, g] = got[i];
    TG_CHECK(wn == gn && w.shape() == g.shape() && w.dtype() == g.dtype() && w.requires_grad() == g.requires_grad(),
             "fast_llama_check", what, " ", i, ": got ", gn, " ", g.shape(), " ", g.dtype(), " grad ", g.requires_grad(),
             ", wanted ", wn, " ", w.shape(), " ", w.dtype(), " grad ", w.requires_grad());
  }
}

void same_bits(const Tensor& want, const Tensor& got, const std::string& what) {
  TG_CHECK(want.defined() == got.defined(), "fast_llama_check", what, ": one side undefined");
  if (!want.defined()) return;
  const auto w = tg::to(want, kFloat64).to_vector<double>(), g = tg::to(got, kFloat64).to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i)
    TG_CHECK(w[i] == g[i], "fast_llama_check", what, " element ", i, ": ", g[i], ", wanted ", w[i]);
}

void check(const std::string& name, nn::LlamaConfig c, DType dtype) {
  Generator gen(1);
  auto ref = std::make_shared<nn::LlamaForCausalLM>(c, gen);
  ref->to(dtype);
  auto fast = bench::fast_llama(c, dtype, Device::cpu(), 7);
  const std::string what = name + " " + dtype_name(dtype);
  TG_CHECK(ref->str() == fast->str(), "fast_llama_check", what, ": str() differs:\n", fast->str(), "\nwanted\n",
           ref->str());
  same_tensors(ref->named_parameters(), fast->named_parameters(), what + " parameter");
  same_tensors(ref->named_buffers(), fast->named_buffers(), what + " buffer");
  for (const auto& [n, b] : ref->named_buffers()) same_bits(b, fast->get_parameter(n), what + " " + n);
  TG_CHECK(fast->num_parameters() == c.num_parameters(), "fast_llama_check", what, ": ", fast->num_parameters(),
           " parameters, wanted ", c.num_parameters());
  fast->load_state_dict(ref->state_dict());
  const Tensor ids = randint(0, c.vocab_size, {2, 16}, gen);
  Tensor want = ref->loss(ids, ids), got = fast->loss(ids, ids);
  same_bits(want, got, what + " loss");
  want.backward();
  got.backward();
  const auto rp = ref->named_parameters(), fp = fast->named_parameters();
  for (size_t i = 0; i < rp.size(); ++i) same_bits(rp[i].second.grad(), fp[i].second.grad(), what + " grad of " + rp[i].first);
  std::cout << what << ": same tree, tensors, loss and gradients\n";
}

}  // namespace

int main() {
  try {
    nn::LlamaConfig gqa = nn::LlamaConfig::tiny(), tied = nn::LlamaConfig::tiny();
    gqa.num_key_value_heads = 2;
    tied.tie_word_embeddings = true;
    for (DType dtype : {kFloat32, kBFloat16}) {
      check("tiny", nn::LlamaConfig::tiny(), dtype);
      check("tiny-gqa", gqa, dtype);
      check("tiny-tied", tied, dtype);
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
