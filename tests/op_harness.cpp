#include "tests/op_harness.h"

#include <map>

#include "core/autograd.h"
#include "core/primitives.h"
#include "ops/shape.h"

namespace tg::test {
namespace {
std::vector<OpCase>& registry() {
  static std::vector<OpCase> cases;
  return cases;
}
}  // namespace

int register_op_cases(std::vector<OpCase> cases) {
  for (auto& c : cases) registry().push_back(std::move(c));
  return 0;
}

const std::vector<OpCase>& op_cases() { return registry(); }

const OpCase& op_case(const std::string& name) {
  for (const auto& c : registry())
    if (c.name == name) return c;
  throw Error("op_case: no case named " + name);
}

Tensor make_input(const InputSpec& spec, Generator& gen, DType dtype, Device device) {
  Shape shape = spec.shape;
  if (spec.transposed) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  Tensor t;
  switch (spec.kind) {
    case InputSpec::Normal: t = randn(shape, gen, {dtype, device}); break;
    case InputSpec::Positive: t = uniform(shape, 0.5, 2.0, gen, {dtype, device}); break;
    case InputSpec::Index: t = randint(0, spec.high, shape, gen, {kInt64, device}); break;
    case InputSpec::Mask: t = randint(0, 2, shape, gen, {kBool, device}); break;
  }
  if (spec.transposed) t = transpose(t, -1, -2);
  if (spec.grad && (spec.kind == InputSpec::Normal || spec.kind == InputSpec::Positive)) t.requires_grad_(true);
  return t;
}

}  // namespace tg::test
