#include "examples/common/evaluate.h"

#include <algorithm>

#include "core/autograd.h"
#include "nn/loss.h"

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

tg::Tensor logits_of(tg::nn::Module& model, const tg::data::Batch& b) {
  if (!b.position_ids.defined()) return model.forward(b.ids);
  auto& lm = dynamic_cast<tg::nn::CausalLM&>(model);
  return lm.logits(lm.hidden_states(b.ids, b.position_ids));
}

double evaluate(tg::nn::Module& model, const tg::data::SequenceDataset& data, int64_t batch, int batches,
                tg::Device device) {
  tg::NoGradGuard no_grad;
  model.eval();
  double total = 0;
  int64_t targets = 0;
  for (int64_t first = 0, i = 0; i < batches && first < data.rows(); ++i, first += batch) {
    tg::data::Batch b = data.rows_batch(first, std::min(batch, data.rows() - first), device);
    if (b.targets == 0) continue;
    total += tg::nn::causal_lm_loss(logits_of(model, b), b.labels).item() * static_cast<double>(b.targets);
    targets += b.targets;
  }
  model.train();
  TG_CHECK(targets > 0, "evaluate", "the validation rows have no target token (every label -100)");
  return total / static_cast<double>(targets);
}

}  // namespace examples
