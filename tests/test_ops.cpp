// Runs the three harness checks over every registered op case.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "ops/cast.h"
#include "testing/testing.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& c : op_cases()) names.push_back(c.name);
  return names;
}

Inputs make_inputs(const OpCase& c, uint64_t seed, DType dtype, Device device) {
  Generator gen(seed);
  Inputs in;
  for (const auto& spec : c.inputs) in.push_back(make_input(spec, gen, dtype, device));
  return in;
}

bool wants_grad(const Tensor& t) { return t.requires_grad(); }

// Output and input gradients of one forward + backward with a fixed random output gradient.
struct CaseRun {
  Tensor out;
  std::vector<Tensor> grads;
};

CaseRun run_case(const OpCase& c, const Inputs& in, uint64_t seed) {
  CaseRun r;
  r.out = c.fn(in);
  if (r.out.requires_grad()) {
    Generator gen(seed);
    Tensor g = randn(r.out.shape(), gen, {kFloat32, Device::cpu()});
    r.out.backward(to(g, r.out.dtype(), r.out.device()));
  }
  for (const auto& t : in) r.grads.push_back(t.grad());
  return r;
}

class OpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OpTest, GradcheckFloat64) {
  const OpCase& c = op_case(GetParam());
  Inputs in = make_inputs(c, 1, kFloat64, Device::cpu());
  std::vector<Tensor> wrt;
  for (const auto& t : in)
    if (wants_grad(t)) wrt.push_back(t);
  if (wrt.empty()) GTEST_SKIP() << "no input of " << c.name << " takes a gradient";
  EXPECT_GRADCHECK([&] { return c.fn(in); }, wrt, {.atol = c.fd_atol, .rtol = c.fd_rtol});
}

TEST_P(OpTest, FrozenInputLeavesOtherGradientsIdentical) {
  const OpCase& c = op_case(GetParam());
  Inputs full = make_inputs(c, 2, kFloat32, Device::cpu());
  CaseRun all = run_case(c, full, 3);
  for (size_t frozen = 0; frozen < full.size(); ++frozen) {
    if (!wants_grad(full[frozen])) continue;
    Inputs in = make_inputs(c, 2, kFloat32, Device::cpu());
    in[frozen].requires_grad_(false);
    CaseRun part = run_case(c, in, 3);
    EXPECT_FALSE(part.grads[frozen].defined()) << "frozen input " << frozen << " got a gradient";
    EXPECT_TENSOR_EQ(part.out, all.out);
    for (size_t i = 0; i < in.size(); ++i)
      if (i != frozen && wants_grad(in[i])) {
        SCOPED_TRACE("input " + std::to_string(i) + " with input " + std::to_string(frozen) + " frozen");
        EXPECT_TENSOR_EQ(part.grads[i], all.grads[i]);
      }
  }
}

TEST_P(OpTest, CudaMatchesCpu) {
  TG_REQUIRE_CUDA();
  const OpCase& c = op_case(GetParam());
  if (!c.gpu) GTEST_SKIP() << c.name << " has no GPU comparison";
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    // Inputs drawn in dt on the GPU; the CPU reference runs in float32 on the same values.
    Inputs gpu_in = make_inputs(c, 4, dt, Device::cuda());
    Inputs cpu_in;
    for (const auto& t : gpu_in) {
      Tensor h = is_floating_point(t.dtype()) ? to(t.detach(), kFloat32, Device::cpu()) : to(t.detach(), Device::cpu());
      if (wants_grad(t)) h.requires_grad_(true);
      cpu_in.push_back(h);
    }
    CaseRun gpu = run_case(c, gpu_in, 5);
    CaseRun cpu = run_case(c, cpu_in, 5);
    double tol = dt == kFloat32 ? c.f32_tol : c.bf16_tol;
    auto as_f32 = [](const Tensor& t) { return is_floating_point(t.dtype()) ? to(t, kFloat32, Device::cpu()) : to(t, Device::cpu()); };
    EXPECT_TENSOR_NEAR(as_f32(gpu.out), cpu.out, tol, tol);
    for (size_t i = 0; i < gpu_in.size(); ++i)
      if (wants_grad(gpu_in[i])) {
        SCOPED_TRACE("gradient of input " + std::to_string(i));
        EXPECT_TENSOR_NEAR(as_f32(gpu.grads[i]), cpu.grads[i], tol, tol);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTest, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tg::test
