// In-place initialisers, as torch.nn.init. They write under NoGradGuard, so they work on
// parameters that require grad, on any device (values are drawn on the host from `gen`).
#pragma once

#include <cstdint>
#include "core/generator.h"
#include "core/tensor.h"

namespace tg::nn::init {

void normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());
void uniform_(const Tensor& t, double low = 0.0, double high = 1.0, Generator& gen = default_generator());
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
// U(-bound, bound), bound = sqrt(6 / ((1 + a^2) fan_in)), fan_in = size(1) * (receptive field).
// a = sqrt(5) (nn.Linear's default) gives bound = 1 / sqrt(fan_in).
void kaiming_uniform_(const Tensor& t, double a = 0.0, Generator& gen = default_generator());
// fan_in of a weight [out, in, ...]: in times the product of the trailing dims.
int64_t fan_in(const Tensor& t);

// While one lives on this thread, modules create their parameters with `parameter_options` and
// leave them uninitialised (every initialiser above does nothing): for parameters whose values come
// next from a file (from_pretrained), as transformers' low_cpu_mem_usage loading. No random draw,
// no float32 copy on the host first.
// With defer_linear_weights, nn::Linear's weight is made unallocated as well (a placeholder of
// its shape, dtype and device holding no memory): from_pretrained then quantises each as it
// streams from the folder, so no dense copy of the quantised layers ever exists, and allocates
// the rest (allocate_unallocated). Nothing may read such a weight before.
class SkipInitGuard {
 public:
  explicit SkipInitGuard(TensorOptions parameter_options, bool defer_linear_weights = false);
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  const SkipInitGuard* outer_;
};
bool skipping();
bool deferring_linear_weights();
// A tensor of `shape` holding no memory (see SkipInitGuard), and whether `t` is one.
Tensor unallocated(const Shape& shape, TensorOptions options);
bool is_unallocated(const Tensor& t);
// Gives an unallocated tensor its memory (uninitialised), in place: every handle sees it.
void allocate_unallocated(const Tensor& t);
// Takes its memory back: unallocated again for every handle (views keep theirs).
void deallocate(const Tensor& t);

// While one lives on this thread, normal_, uniform_ and kaiming_uniform_ only reserve their draws
// from the generator and write nothing: for the layers' default init that a model's own init
// (transformers' _init_weights) overwrites next, so that what is drawn after gets the numbers of
// the full draw, at none of its cost. Constant initialisers still write.
class ReserveDrawsGuard {
 public:
  ReserveDrawsGuard();
  ~ReserveDrawsGuard();
  ReserveDrawsGuard(const ReserveDrawsGuard&) = delete;
  ReserveDrawsGuard& operator=(const ReserveDrawsGuard&) = delete;

 private:
  const ReserveDrawsGuard* outer_;
};
// Advances gen past the draw normal_ or uniform_ of t makes, writing nothing.
void reserve_draw(const Tensor& t, Generator& gen);
// What a module's parameters are created as: float32 on the CPU, or the SkipInitGuard's options.
TensorOptions parameter_options();

}  // namespace tg::nn::init
