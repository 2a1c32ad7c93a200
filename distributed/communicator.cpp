#include "distributed/communicator.h"

namespace tg::distributed {

void check_collective_tensor(const char* op, const Tensor& t) {
  TG_CHECK(t.defined(), op, "got an undefined tensor");
  TG_CHECK(t.is_contiguous(), op, "wants a contiguous tensor, got shape ", t.shape(), " strides ", t.strides());
  const DType d = t.dtype();
  TG_CHECK(d == kFloat32 || d == kBFloat16 || d == kFloat64 || d == kInt64 || d == kInt32, op,
           "cannot reduce a ", d, " tensor (wants float32, bfloat16, float64, int32 or int64)");
}

}  // namespace tg::distributed
