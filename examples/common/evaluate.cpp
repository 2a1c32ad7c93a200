#include "examples/common/evaluate.h"

#include "core/autograd.h"

namespace examples {

double evaluate(tg::nn::LlamaForCausalLM& model, const ByteDataset& data, int64_t batch, int64_t seq, int batches,
                tg::Device device) {
  tg::NoGradGuard no_grad;
  model.eval();
  tg::Generator gen(1234);
  double total = 0;
  for (int i = 0; i < batches; ++i) {
    tg::Tensor ids = data.batch(/*train=*/false, batch, seq, gen, device);
    total += model.loss(ids, ids).item();
  }
  model.train();
  return total / batches;
}

}  // namespace examples
