// docs/your-project.md's GoogleTest of a custom module, checked with tapegrad::testing.
#include <gtest/gtest.h>

#include "tapegrad.h"
#include "testing/testing.h"

struct Gate : tg::nn::Module {  // y = x * sigmoid(W x + b)
  std::shared_ptr<tg::nn::Linear> proj;
  Gate() : Module("Gate") {
    proj = std::make_shared<tg::nn::Linear>(8, 8);
    register_module("proj", proj);
  }
  tg::Tensor forward(const tg::Tensor& x) override { return tg::mul(x, tg::sigmoid(proj->forward(x))); }
};

class GateTest : public tg::testing::SeededTest {};  // a Generator `gen` seeded per test

TEST_F(GateTest, NamesAndGradients) {
  Gate gate;
  EXPECT_EQ(gate.named_parameters()[0].first, "proj.weight");
  gate.to(tg::kFloat64);  // gradcheck runs in float64
  tg::Tensor x = tg::randn({2, 3, 8}, gen, {tg::kFloat64, tg::Device::cpu(), /*requires_grad=*/true});
  EXPECT_GRADCHECK([&] { return gate.forward(x); }, {x, gate.proj->weight, gate.proj->bias});
}
