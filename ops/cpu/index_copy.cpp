// CPU index_copy_: one memcpy of `inner` elements per (outer, index entry).
#include <cstring>

#include "core/detail/type_dispatch.h"
#include "ops/index_copy_kernels.h"

namespace tg::cpu {

void index_copy(const Tensor& self, const Tensor& index, const Tensor& source, int64_t outer, int64_t size,
                int64_t inner) {
  const size_t es = element_size(self.dtype()), row = static_cast<size_t>(inner) * es;
  const int64_t count = index.numel();
  auto* dst = static_cast<unsigned char*>(self.data_ptr());
  const auto* src = static_cast<const unsigned char*>(source.data_ptr());
  dispatch_index(index.dtype(), "index_copy_", [&](auto tag) {
    using I = typename decltype(tag)::type;
    const I* idx = index.data_ptr<I>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(dst + static_cast<size_t>(o * size + static_cast<int64_t>(idx[i])) * row,
                    src + static_cast<size_t>(o * count + i) * row, row);
  });
}

}  // namespace tg::cpu
