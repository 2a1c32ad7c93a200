#include "core/primitives.h"

#include "core/autograd.h"
#include "core/memory.h"

#ifdef TG_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace tg {

namespace detail {
void check_writable(const char* op, const Tensor& dst) {
  TG_CHECK(!(grad_mode_enabled() && dst.requires_grad()), op,
           "cannot write in place into a tensor that requires grad while grad mode is on "
           "(wrap the update in tg::NoGradGuard, as optimizers do)");
}
}  // namespace detail

void copy_(const Tensor& dst, const Tensor& src) {
  TG_CHECK(dst.shape() == src.shape(), "copy_", "destination shape ", dst.shape(),
           " differs from source shape ", src.shape());
  detail::check_writable("copy_", dst);
  dst.bump_version();
  if (dst.numel() == 0) return;
  Device dd = dst.device(), sd = src.device();
  if (dd.is_cpu() && sd.is_cpu()) return detail::cpu_copy(dst, src);
  // A plain transfer: same dtype, both contiguous.
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous())
    return copy_bytes(dst.data_ptr(), dd, src.data_ptr(), sd, dst.nbytes());
#ifdef TG_WITH_CUDA
  if (dd == sd) return cuda::copy_strided(dst, src);
  // Across devices: make the source contiguous where it is, move it, convert where it lands.
  Tensor moved = Tensor::empty(src.shape(), {src.dtype(), dd});
  copy_bytes(moved.data_ptr(), dd, clone_data(src).data_ptr(), sd, moved.nbytes());
  return copy_(dst, moved);
#else
  fail("copy_", "device ", dd.is_cuda() ? dd : sd, " needs the CUDA backend, which this build lacks");
#endif
}

void fill_(const Tensor& dst, double value) {
  detail::check_writable("fill_", dst);
  TG_CHECK(fits_dtype(value, dst.dtype()), "fill_", "value ", value, " does not fit dtype ", dst.dtype());
  dst.bump_version();
  if (dst.numel() == 0) return;
#ifdef TG_WITH_CUDA
  if (dst.device().is_cuda()) return cuda::fill(dst, value);
#endif
  detail::cpu_fill(dst, value);
}

void accumulate_(const Tensor& dst, const Tensor& src) {
  TG_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype() && dst.device() == src.device(),
           "accumulate_", "wants tensors of one shape, dtype and device, got ", dst.shape(), " ",
           dst.dtype(), " ", dst.device(), " += ", src.shape(), " ", src.dtype(), " ", src.device());
  dst.bump_version();
  if (dst.numel() == 0) return;
#ifdef TG_WITH_CUDA
  if (dst.device().is_cuda()) return cuda::accumulate(dst, src);
#endif
  detail::cpu_accumulate(dst, src);
}

Tensor clone_data(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.options());
  NoGradGuard g;
  copy_(out, t);
  return out;
}

}  // namespace tg
