// The LM head's loss, forward + backward: linear_cross_entropy (fused, chunked) against linear
// then cross_entropy on float32 logits (what the model runs without the fusion), with the head's
// weight trainable and frozen (LoRA). x [N, H] requires grad, weight [V, H], 10% of the targets
// ignore_index (padding). Per case: the median of --reps calls (on the GPU CUDA events after a
// 256 MB L2 flush, on the CPU the host clock) and the peak memory above the inputs and their
// gradients over one call (the allocator's peak bytes in use). Before timing, the two losses and
// gradients are compared: a fused result that is not the unfused one stops the benchmark.
// --chunk-rows R,... also times the fused op with chunks of R rows (the choice's sweep; rows to
// --chunks-json). --profile runs one more fused call a case between cudaProfilerStart / Stop
// (for `ncu --profile-from-start off`).
//   linear_ce_bench [--device cuda|cpu] [--shapes NxHxV,...] [--reps N] [--json out.json]
//                   [--chunk-rows R,... --chunks-json chunks.json]
// bench/torch_linear_ce_ref.py times PyTorch (eager, torch.compile, Liger) on the same cases;
// scripts/gpu/bench.sh linear-ce runs both (rows to bench/results/{linear_ce,torch_linear_ce}.json).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/bench_measure.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "ops/detail/linear_cross_entropy_chunks.h"
#include "ops/linear_cross_entropy.h"
#include "tapegrad.h"

using namespace tg;

namespace {

struct Case {
  int64_t N, H, V;
  std::string name() const { return std::to_string(N) + "x" + std::to_string(H) + "x" + std::to_string(V); }
};

// "NxHxV,NxHxV,..."
std::vector<Case> parse_cases(const std::string& list) {
  std::vector<Case> cases;
  std::stringstream ss(list);
  for (std::string s; std::getline(ss, s, ',');) {
    const std::optional<std::vector<int64_t>> n = io::parse_integers<int64_t>(s, 'x');
    if (!n || n->size() != 3 || std::any_of(n->begin(), n->end(), [](int64_t d) { return d < 1 || d > INT32_MAX; }))
      throw examples::UsageError("--shapes wants NxHxV,... with sizes in [1, 2^31), got '" + s + "'\n");
    cases.push_back({(*n)[0], (*n)[1], (*n)[2]});
  }
  return cases;
}

// "R,R,..." chunk rows, each at least 1.
std::vector<int64_t> parse_rows(const std::string& list) {
  std::vector<int64_t> rows;
  std::stringstream ss(list);
  for (std::string s; std::getline(ss, s, ',');) {
    const std::optional<int64_t> r = io::parse_integer<int64_t>(s);
    if (!r || *r < 1) throw examples::UsageError("--chunk-rows wants R,... with positive rows, got '" + s + "'\n");
    rows.push_back(*r);
  }
  return rows;
}

// Uniform class indices, a `frac` of them ignore_index (-100), as in a padded batch.
Tensor padded_targets(int64_t n, int64_t classes, double frac, Device device) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> cls(0, classes - 1);
  std::bernoulli_distribution pad(frac);
  std::vector<int64_t> t(n);
  for (int64_t& v : t) v = pad(rng) ? -100 : cls(rng);
  return from_vector(t, {n}, device);
}

struct Result {
  double loss;
  Tensor dx, dw;
};

}  // namespace

int run(int argc, char** argv) {
  examples::Flags flags("linear_ce_bench", "Times linear_cross_entropy against linear + cross_entropy, fwd+bwd.");
  flags.add("device", "cuda", "cuda | cpu | auto")
      .add("dtype", "bf16", examples::kDtypeHelp)
      .add("shapes", "", "NxHxV,... (default: 8192x768x32000,16384x2048x128256 on cuda, 512x64x2000 on cpu)")
      .add("reps", "30", "timed calls per case (the median is reported)")
      .add("threads", "2", "CPU threads")
      .add("json", "", "also write the rows to this file (bench/results/linear_ce.json's rows)")
      .add("chunk-rows", "", "R,...: also time the fused op with chunks of R rows")
      .add("chunks-json", "", "write those rows to this file")
      .add("profile", "0", "1: one more fused call a case between cudaProfilerStart / Stop");
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  const Device device = examples::device_flag(flags);
  if (device.is_cuda() && !cuda_is_available()) throw Error("linear_ce_bench: --device cuda, but no CUDA device");
  set_num_threads(static_cast<int>(flags.integer("threads")));
  const DType dtype = examples::dtype_flag(flags);
  const int reps = static_cast<int>(flags.integer("reps"));
  if (reps < 1) throw examples::UsageError("--reps wants at least 1, got " + flags.str("reps") + "\n");
  const std::vector<Case> cases = parse_cases(flags.was_set("shapes") ? flags.str("shapes")
                                             : device.is_cuda()      ? "8192x768x32000,16384x2048x128256"
                                                                     : "512x64x2000");

  // Differences between the fused and unfused results above these stop the benchmark: both
  // round the same logits, dlogits go through the dtype once in either order.
  const double tolerance = dtype == kBFloat16 ? 2e-2 : 1e-4;
  const std::vector<int64_t> sweep = parse_rows(flags.str("chunk-rows"));
  bench::Timer timer(device);
  bench::JsonRows rows("linear_ce", bench::machine(device)), sweep_rows("linear_ce_chunks", bench::machine(device));
  std::printf("%-20s %-9s %-16s %10s %10s %12s %12s\n", "shape (NxHxV)", "weight", "impl", "ms", "peak MiB",
              "loss err", "grad err");
  for (const Case& c : cases) {
    Generator gen(1);
    // Weight as initialised (std 1/sqrt(H)): logits of unit scale, a softmax that is not one-hot.
    Tensor x = to(randn({c.N, c.H}, gen, {kFloat32, device}), dtype).requires_grad_(true);
    Tensor w = to(mul(randn({c.V, c.H}, gen, {kFloat32, device}), 1.0 / std::sqrt(double(c.H))), dtype);
    const Tensor targets = padded_targets(c.N, c.V, 0.10, device);
    const std::vector<std::pair<std::string, std::function<Tensor()>>> impls = {
        {"tapegrad_fused", [&] { return linear_cross_entropy(x, w, targets); }},
        {"tapegrad_unfused",
         [&] {
           const Tensor logits = linear(x, w);
           return cross_entropy(dtype == kBFloat16 ? to(logits, kFloat32) : logits, targets);
         }}};
    for (const bool trainable : {true, false}) {
      w.requires_grad_(trainable);
      const char* weight = trainable ? "trainable" : "frozen";
      // The loss and fresh gradients of each implementation, compared before anything is timed.
      std::vector<Result> results;
      for (const auto& [impl, loss_of] : impls) {
        x.set_grad(Tensor());
        w.set_grad(Tensor());
        const Tensor loss = loss_of();
        loss.backward();
        results.push_back({loss.item(), x.grad(), w.grad()});
      }
      const Result &fused = results[0], &unfused = results[1];
      const double loss_err = std::abs(fused.loss - unfused.loss) / std::max(std::abs(unfused.loss), 1e-30);
      double grad_err = bench::relative_error(fused.dx, unfused.dx);
      if (trainable) grad_err = std::max(grad_err, bench::relative_error(fused.dw, unfused.dw));
      results.clear();
      if (!(loss_err <= 1e-3 && grad_err <= tolerance))
        throw Error("linear_ce_bench: at " + c.name() + " (" + weight + ") the fused loss / gradients differ from the " +
                    "unfused ones by " + std::to_string(loss_err) + " / " + std::to_string(grad_err) +
                    " (relative), wanted at most 1e-3 / " + std::to_string(tolerance));
      if (flags.integer("profile")) bench::profiled(device, [&] { impls[0].second().backward(); });
      for (const auto& [impl, loss_of] : impls) {
        auto step = [&] { loss_of().backward(); };  // gradients accumulate into the existing .grad
        step();                                     // .grad exists before the measurements
        const double peak = bench::peak_mib_above(device, step);
        const double ms = timer.median_ms(step, reps);
        std::printf("%-20s %-9s %-16s %10.3f %10.1f %12.2e %12.2e\n", c.name().c_str(), weight, impl.c_str(), ms, peak,
                    loss_err, grad_err);
        bench::JsonRow& row = rows.add()
                                  .str("shape", c.name())
                                  .str("impl", impl)
                                  .str("weight", weight)
                                  .str("dtype", flags.str("dtype"))
                                  .num("ms", ms, 5)
                                  .num("peak_mib", peak, 5);
        if (impl == "tapegrad_fused")  // the rows a chunk the op chose
          row.num("chunk_rows", double(detail::linear_cross_entropy_chunk_rows(c.N, c.V, x.element_size(), trainable)));
      }
      for (const int64_t r : sweep) {
        auto step = [&] { detail::linear_cross_entropy_chunked(x, w, targets, -100, Reduction::Mean, r).backward(); };
        step();
        const double peak = bench::peak_mib_above(device, step);
        const double ms = timer.median_ms(step, reps);
        const std::string impl = "fused, " + std::to_string(r) + " rows";
        std::printf("%-20s %-9s %-16s %10.3f %10.1f\n", c.name().c_str(), weight, impl.c_str(), ms, peak);
        sweep_rows.add()
            .str("shape", c.name())
            .str("weight", weight)
            .str("dtype", flags.str("dtype"))
            .num("chunk_rows", double(r))
            .num("ms", ms, 5)
            .num("peak_mib", peak, 5);
      }
    }
  }
  rows.write(flags.str("json"));
  sweep_rows.write(flags.str("chunks-json"));
  return 0;
}

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
