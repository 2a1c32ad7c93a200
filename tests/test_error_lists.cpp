// Errors that list tensors (missing, unexpected, mis-shaped) summarise long lists: the counts,
// the first few names and how many more, not kilobytes.
#include <gtest/gtest.h>

#include "core/factory.h"
#include "nn/models/llama.h"
#include "nn/models/pretrained.h"
#include "tests/test_support.h"

namespace {

TEST(ErrorLists, NameListShowsTheFirstFewAndCountsTheRest) {
  EXPECT_EQ(tg::name_list({"a", "b"}), "a, b");
  std::vector<std::string> many;
  for (int i = 0; i < 300; ++i) many.push_back("layer." + std::to_string(i));
  EXPECT_EQ(tg::name_list(many), "layer.0, layer.1, layer.2, layer.3, layer.4, layer.5, ... and 294 more");
}

TEST(ErrorLists, AStateDictOfAnotherModelIsSummarised) {
  tg::nn::LlamaConfig big = tg::nn::LlamaConfig::tiny();
  big.num_hidden_layers = 12;
  tg::nn::LlamaForCausalLM model(big);
  tg::nn::StateDict other;
  for (int i = 0; i < 200; ++i) other["foreign." + std::to_string(i)] = tg::zeros({2});
  const std::string msg = tg::test::error_of([&] { model.load_state_dict(other); });
  EXPECT_NE(msg.find("unexpected keys (200): foreign.0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("... and 194 more"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing keys (111)"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 1200u) << msg;
}

}  // namespace
