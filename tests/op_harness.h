// The op test harness (after ggml's test-backend-ops): every op registers cases here once and
// gets, for free, (1) a float64 finite-difference gradient check on the CPU, (2) a mask check:
// freezing any one input leaves every other gradient bitwise identical and gives the frozen
// input no gradient, and (3) on a GPU, forward and backward against the CPU backend in float32
// and bfloat16 on fresh random inputs. Register with:
//   TG_OP_CASES({ {"relu", {{{7, 33}}}, [](const Inputs& in) { return tg::relu(in[0]); }}, ... });
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/tensor.h"

namespace tg::test {

using Inputs = std::vector<Tensor>;

struct InputSpec {
  Shape shape;
  enum Kind { Normal, Positive, Index, Mask } kind = Normal;
  int64_t high = 0;         // Index: values in [0, high)
  bool grad = true;         // a float input that requires grad
  bool transposed = false;  // passed as a non-contiguous view (last two dims swapped in memory)
};

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  std::function<Tensor(const Inputs&)> fn;
  double fd_rtol = 1e-5;    // finite differences in float64
  double fd_atol = 1e-7;
  double f32_tol = 1e-4;    // GPU float32 vs CPU float32 (rtol = atol)
  double bf16_tol = 3e-2;   // GPU bfloat16 vs CPU float32 on the same rounded inputs
  bool gpu = true;          // compare against a CUDA backend
};

int register_op_cases(std::vector<OpCase> cases);
const std::vector<OpCase>& op_cases();
const OpCase& op_case(const std::string& name);

// The public functions of the op headers under `ops_dir` (ops/<op>.h with an ops/<op>.cpp): the
// names declared at namespace tg scope, operators included, each once (overloads are one name).
std::vector<std::string> public_op_functions(const std::string& ops_dir);
// The public function a case exercises: the longest of `functions` that the case's name equals or
// starts with followed by '_' ("log_softmax_last": log_softmax, not log); empty if none.
std::string op_of_case(const std::string& case_name, const std::vector<std::string>& functions);

// A fresh random input for `spec` (float inputs in `dtype`), on `device`.
Tensor make_input(const InputSpec& spec, Generator& gen, DType dtype, Device device);

}  // namespace tg::test

#define TG_OP_CASES_CAT2(a, b) a##b
#define TG_OP_CASES_CAT(a, b) TG_OP_CASES_CAT2(a, b)
#define TG_OP_CASES(...) \
  static const int TG_OP_CASES_CAT(tg_op_cases_, __LINE__) = ::tg::test::register_op_cases(__VA_ARGS__)
