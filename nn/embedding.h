// nn::Embedding: a [num_embeddings, embedding_dim] table indexed by integer ids
// (torch.nn.Embedding; initialised N(0, 1) like PyTorch, models re-initialise).
#pragma once

#include <cstdint>
#include "core/generator.h"
#include "nn/module.h"

namespace tg::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen = default_generator());
  // ids: int32/int64 of any shape -> [..., embedding_dim]
  Tensor forward(const Tensor& ids) override;

  int64_t num_embeddings, embedding_dim;
  Tensor weight;

 protected:
  std::string extra_repr() const override;
};

}  // namespace tg::nn
