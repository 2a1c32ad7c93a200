#include "examples/common/generate.h"

#include <algorithm>
#include <functional>
#include <cstdio>
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/philox.h"
#include "data/utf8.h"
#include "ops/cast.h"
#include "ops/shape.h"

namespace examples {

std::vector<int64_t> generate_ids(tg::nn::Module& model, std::vector<int64_t> ids, int new_tokens, int64_t context,
                                  tg::Device device, double temperature, tg::Generator& gen, int top_k) {
  tg::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<int64_t> out;
  for (int i = 0; i < new_tokens && !ids.empty(); ++i) {
    int64_t t = std::min<int64_t>(context, static_cast<int64_t>(ids.size()));
    std::vector<int64_t> ctx(ids.end() - t, ids.end());
    tg::Tensor logits = model.forward(tg::from_vector(ctx, {1, t}, device));
    std::vector<float> last = tg::to(tg::slice(logits, 1, t - 1, t), tg::kFloat32).to_vector<float>();
    int64_t next = std::max_element(last.begin(), last.end()) - last.begin();
    if (temperature > 0) {
      // Sample from softmax(logits / temperature) with one uniform draw.
      float cutoff = -INFINITY;
      if (top_k > 0 && top_k < static_cast<int>(last.size())) {
        std::vector<float> sorted = last;
        std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<float>());
        cutoff = sorted[top_k - 1];
      }
      double mx = last[next], total = 0;
      std::vector<double> p(last.size());
      for (size_t v = 0; v < last.size(); ++v)
        total += p[v] = last[v] >= cutoff ? std::exp((last[v] - mx) / temperature) : 0.0;
      double u = tg::uniform01(tg::philox(gen.seed(), gen.reserve(1)).v[0]) * total;
      for (next = 0; next + 1 < static_cast<int64_t>(p.size()) && u >= p[next]; ++next) u -= p[next];
    }
    ids.push_back(next);
    out.push_back(next);
  }
  model.train(was_training);
  return out;
}

std::string generate(tg::nn::LlamaForCausalLM& model, const std::string& prompt, int new_bytes, double temperature,
                     tg::Generator& gen, int top_k) {
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  for (int64_t& v : ids) v = static_cast<unsigned char>(v);
  std::string out;
  for (int64_t b : generate_ids(model, ids, new_bytes, model.config.max_position_embeddings,
                                model.lm_head->weight.device(), temperature, gen, top_k))
    out += static_cast<char>(b);
  return out;
}

std::string printable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t valid = c >= 0x80 ? tg::data::utf8::valid_prefix(std::string_view(text).substr(i, 4)) : 0;
    const size_t n = c >= 0x80 ? tg::data::utf8::char_len(c) : 1;
    if (c >= 0x80 && valid >= n) {  // a whole UTF-8 character
      out.append(text, i, n);
      i += n;
      continue;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c < 32 || c >= 127 || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

}  // namespace examples
