// Packing without cross-talk, measured (issue 38 item 4): a LoRA training step of a Llama on a
// chat length mix (the conversation lengths of tests/fixtures/chat_dataset/expected.json repeated
// to --conversations), in rows of --seq tokens laid out four ways, and the real (not padding)
// tokens a second each trains:
//   pack-separate  whole conversations packed best-fit-decreasing, each attending only to itself
//                  (data::Layout::PackSeparate: position ids, the banded flash kernels)
//   pack           the same tokens as one stream (Layout::Pack): every token real, causal attention
//                  across conversations; the unpadded rate that packing should approach
//   pad            one conversation a row of --seq (Layout::Pad)
//   pad-tight      one conversation a row of the longest conversation (rounded up to 64 tokens),
//                  --seq / that rows a step: padding to the longest, the least padding wastes
// Every mode trains --batch x --seq tokens a step (pad-tight: as many in shorter rows). A step is
// zero_grad, loss, backward and AdamW, the median of --steps after --warmup, each step ended by
// reading the loss back (eager), or replayed as one CUDA graph (--cuda-graph). Token ids are
// random (the lengths are what matters), every token learned; --json writes the rows
// (bench/results/packing.json).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/real_llama.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "io/file.h"
#include "io/json.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "train/graphed_step.h"

using namespace tg;

namespace {

// The token counts of the fixture's conversations (the cases with ids), in file order.
std::vector<int64_t> fixture_lengths(const std::string& path) {
  const std::vector<uint8_t> bytes = io::read_file(path);
  const json::Value root = json::parse(std::string(bytes.begin(), bytes.end()));
  std::vector<int64_t> lengths;
  for (const json::Value& c : root.at("cases").as_array("cases"))
    if (const json::Value* ids = c.find("ids")) lengths.push_back(static_cast<int64_t>(ids->as_array("ids").size()));
  TG_CHECK(!lengths.empty(), "packing_bench", "'", path, "' holds no conversation with ids");
  return lengths;
}

struct Mode {
  std::string name;
  data::Layout layout;
  int64_t seq, batch;
};

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("packing_bench", "Times a LoRA step on a chat length mix, packed, packed separately and padded.");
  flags.add("config", "bench-135m", "tiny | small | bench-135m | llama-1b | llama3-8b (bench/real_llama.h)")
      .add("lengths", "tests/fixtures/chat_dataset/expected.json", "the conversations whose lengths make the mix")
      .add("conversations", "10000", "conversations: the fixture's lengths repeated")
      .add("seq", "2048", "tokens a row")
      .add("batch", "4", "rows a step (pad-tight: as many tokens in shorter rows)")
      .add("modes", "pack,pack-separate,pad,pad-tight", "the layouts to time (vs pack: against the first pack row)")
      .add("device", "cuda", "cpu | cuda | auto")
      .add("dtype", "bf16", "f32 | bf16 (bf16: the frozen base in bfloat16, float32 adapters)")
      .add("threads", "2", "CPU threads")
      .add("warmup", "3", "untimed steps")
      .add("steps", "10", "timed steps (the median is reported)")
      .add("cuda-graph", "false", "time replays of the step captured as one CUDA graph (GPU)")
      .add("json", "", "also write the rows to this file (bench/results/packing.json)");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    set_num_threads(static_cast<int>(flags.integer("threads", 1, 1024)));
    const Device device = examples::device_flag(flags);
    const DType dtype = flags.str("dtype") == "bf16" ? kBFloat16 : kFloat32;
    const int64_t seq = flags.integer("seq", 2, 1 << 20), batch = flags.integer("batch", 1, 1 << 16);
    const bool graphed = flags.boolean("cuda-graph");
    // A graph is captured at the second step: the timed ones are replays.
    const int64_t warmup = std::max<int64_t>(flags.integer("warmup", 0), graphed ? 2 : 0), steps = flags.integer("steps", 1);
    bench::BenchLlama bl = bench::bench_llama(flags.str("config"));
    nn::LlamaConfig& c = bl.config;
    c.max_position_embeddings = std::max(c.max_position_embeddings, seq);
    const int32_t pad_id = static_cast<int32_t>(c.vocab_size - 1);  // no conversation token is padding

    // The conversations: the fixture's lengths in turn, random ids below pad_id.
    const std::vector<int64_t> lengths = fixture_lengths(flags.str("lengths"));
    const int64_t n = flags.integer("conversations", 1);
    Generator gen(0);
    std::vector<std::vector<int32_t>> conversations(static_cast<size_t>(n));
    int64_t longest = 0, total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t len = std::min(seq, lengths[i % lengths.size()]);
      for (int64_t id : randint(0, pad_id, {len}, gen, {kInt64}).to_vector<int64_t>())
        conversations[i].push_back(static_cast<int32_t>(id));
      longest = std::max(longest, len), total += len;
    }
    const auto corpus = data::corpus_from_examples(conversations);
    const int64_t tight = std::min(seq, (longest + 63) / 64 * 64);
    std::printf("%s, %s on %s%s: %lld conversations of %lld tokens on average (the longest %lld), rows of %lld\n",
                flags.str("config").c_str(), flags.str("dtype").c_str(), device.str().c_str(),
                graphed ? ", CUDA graph" : "", static_cast<long long>(n),
                static_cast<long long>(total / n), static_cast<long long>(longest), static_cast<long long>(seq));
    std::printf("%-14s %6s %6s %7s %10s %9s %12s %9s\n", "mode", "seq", "rows", "fill", "ms/step", "docs/row",
                "real tok/s", "vs pack");

    auto model = bench::fast_llama(c, dtype, device);
    peft::apply_lora(*model, {});
    optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-4, .weight_decay = 0.01});

    bench::JsonRows rows("packing", bench::machine(device));
    double pack_rate = 0;
    for (const std::string& name : flags.list("modes")) {
      Mode m;
      if (name == "pack-separate") m = {name, data::Layout::PackSeparate, seq, batch};
      else if (name == "pack") m = {name, data::Layout::Pack, seq, batch};
      else if (name == "pad") m = {name, data::Layout::Pad, seq, batch};
      else if (name == "pad-tight") m = {name, data::Layout::Pad, tight, batch * seq / tight};
      else throw examples::UsageError("--modes wants pack-separate, pack, pad and / or pad-tight, got '" + name + "'\n");
      const data::SequenceDataset data(corpus, m.seq, m.layout, pad_id);
      // A step's batches drawn in the seeded order; the real tokens and documents they hold.
      const int64_t draws = warmup + steps;
      std::vector<data::Batch> batches;
      int64_t real = 0, docs = 0;
      for (int64_t i = 0; i < draws; ++i) {
        batches.push_back(data.batch(i, m.batch, 0, device));
        const data::Batch cpu = data.batch(i, m.batch, 0, Device::cpu());
        const std::vector<int64_t> ids = cpu.ids.to_vector<int64_t>();
        real += std::count_if(ids.begin(), ids.end(), [&](int64_t id) { return id != pad_id; });
        if (cpu.position_ids.defined()) {
          const std::vector<int64_t> pos = cpu.position_ids.to_vector<int64_t>();
          for (size_t t = 0; t < pos.size(); ++t) docs += pos[t] == 0 && ids[t] != pad_id;
        } else {
          docs += m.layout == data::Layout::Pad ? m.batch : 0;
        }
      }
      // A CUDA graph replays one layout's shapes: a step of its own for each (run, captured, replayed).
      train::GraphedStep timed(graphed, [&](const data::Batch& b) {
        opt.zero_grad();
        Tensor loss = model->loss(b.ids, b.labels, b.position_ids);
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss};
      });
      std::vector<double> ms;
      for (int64_t i = 0; i < draws; ++i) {
        const data::Batch& b = batches[static_cast<size_t>(i)];
        const auto t0 = std::chrono::steady_clock::now();
        const double loss = timed(b)[0].item();
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        TG_CHECK(std::isfinite(loss), "packing_bench", name, ": the loss of step ", i, " is ", loss);
        if (i >= warmup) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2], tokens = static_cast<double>(real) / static_cast<double>(draws);
      const double rate = tokens / (med / 1e3), fill = tokens / static_cast<double>(m.batch * m.seq);
      if (name == "pack") pack_rate = rate;
      // Pack's rows cut conversations anywhere: no count of documents a row.
      const double per_row = m.layout == data::Layout::Pack ? NAN : static_cast<double>(docs) / static_cast<double>(draws * m.batch);
      std::printf("%-14s %6lld %6lld %6.1f%% %10.2f %9.1f %12.0f %9s\n", name.c_str(), static_cast<long long>(m.seq),
                  static_cast<long long>(m.batch), 100 * fill, med, per_row, rate,
                  pack_rate > 0 ? (std::to_string(rate / pack_rate).substr(0, 4)).c_str() : "–");
      rows.add()
          .str("config", flags.str("config"))
          .str("dtype", flags.str("dtype"))
          .boolean("graph", graphed)
          .str("mode", name)
          .num("seq", static_cast<double>(m.seq))
          .num("rows", static_cast<double>(m.batch))
          .num("conversations", static_cast<double>(n))
          .num("mean_tokens", static_cast<double>(total) / static_cast<double>(n), 4)
          .num("fill", fill, 4)
          .num("docs_per_row", per_row, 4)
          .num("ms", med, 5)
          .num("real_tok_s", rate, 5);
    }
    rows.write(flags.str("json"));
    return 0;
  } catch (const examples::UsageError& e) {
    std::cerr << e.what() << examples::kSeeHelp;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "packing_bench: " << e.what() << "\n";
    return 1;
  }
}
