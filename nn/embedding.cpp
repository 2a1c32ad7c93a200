#include "nn/embedding.h"

#include "core/factory.h"
#include "nn/init.h"
#include "ops/embedding.h"

namespace tg::nn {

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen)
    : Module("Embedding"), num_embeddings(num), embedding_dim(dim) {
  TG_CHECK(num > 0 && dim > 0, "Embedding", "sizes must be positive, got ", num, " x ", dim);
  weight = empty({num, dim}, init::parameter_options());
  init::normal_(weight, 0.0, 1.0, gen);
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& ids) { return embedding(weight, ids); }

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
}

}  // namespace tg::nn
