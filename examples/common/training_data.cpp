#include "examples/common/training_data.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "data/chat_dataset.h"
#include "examples/common/base_model.h"
#include "examples/common/data.h"
#include "examples/common/printable.h"
#include "examples/common/vocabulary.h"

namespace examples {
namespace {

namespace data = tg::data;

// A run refuses to lose more than this share of a dataset's learned tokens to --seq, unless told.
constexpr double kMostTruncated = 0.05;

// "\n" and "\t" in a flag value (--doc-separator '\n\n').
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'n' || s[i + 1] == 't')) out += s[++i] == 'n' ? '\n' : '\t';
    else out += s[i];
  }
  return out;
}

data::SystemMessage system_message_flag(const Flags& flags) {
  const std::string v = flags.str("system-message");
  if (v == "keep") return data::SystemMessage::Keep;
  if (v == "merge") return data::SystemMessage::Merge;
  if (v == "drop") return data::SystemMessage::Drop;
  throw UsageError("--system-message wants keep, merge or drop, got '" + v + "'\n");
}

std::shared_ptr<const data::TokenCorpus> corpus_of(const Flags& flags, const char* flag,
                                                   const std::optional<data::Tokenizer>& tokenizer) {
  return load_corpus(flags.str(flag), flag, tokenizer, unescape(flags.str("doc-separator")), flags.boolean("bytes"),
                     system_message_flag(flags));
}

// What cutting `rows`' examples at --seq loses: refused when nothing learned is left, or (unless
// --allow-truncation) more than kMostTruncated of it; one line when anything is cut.
void check_truncation(const data::SequenceDataset& rows, const std::string& name, const Flags& flags) {
  const data::TruncationReport r = rows.truncation_report();
  const std::string seq = flags.str("seq"), mode = flags.str("truncation-mode");
  if (r.learned == 0)
    throw UsageError(name + " has no learned token: every label is -100 (only prompts, or no assistant turn); nothing "
                     "to train on\n");
  if (r.cut == 0) return;
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%%", 100.0 * r.lost_share());
  const std::string what = name + ": " + std::to_string(r.cut) + " of " + std::to_string(r.examples) +
                           " examples are longer than --seq " + seq + " (the longest, example " +
                           std::to_string(r.longest_example) + ", has " + std::to_string(r.longest) + " tokens); cut (" +
                           mode + ") they lose " + share + " of the learned tokens (" + std::to_string(r.lost) + " of " +
                           std::to_string(r.learned) + ")" +
                           (r.emptied ? " and leave " + std::to_string(r.emptied) + " examples nothing to learn" : "");
  if (r.kept() > 0 && (r.lost_share() <= kMostTruncated || flags.boolean("allow-truncation"))) {
    std::printf("%s\n", what.c_str());
    return;
  }
  std::vector<std::string> ways = {"raise --seq (--seq " + std::to_string((r.longest + 63) / 64 * 64) +
                                   " keeps every example whole)"};
  if (mode == "keep_start") ways.push_back("keep the ends with --truncation-mode keep_end");
  if (r.kept() > 0) ways.push_back("pass --allow-truncation to train on what is left");
  std::string how = ways[0];
  for (size_t i = 1; i < ways.size(); ++i) how += (i + 1 == ways.size() ? " or " : ", ") + ways[i];
  throw UsageError(what + ": " + how + "\n");
}

}  // namespace

void add_data_flags(Flags& flags) {
  flags.add("data", "", "training data: .jsonl ({\"text\"}, {\"prompt\", \"completion\"}, {\"messages\"} with optional "
                        "\"tools\", or ShareGPT's {\"conversations\"}), .bin (llm.c token file) or text (default, toy "
                        "base only: a generated 'logbook' corpus)")
      .add("val", "", "validation data, as --data (default: the last --val-fraction of --data)")
      .add("val-fraction", "0.1", "the share of --data that validates when there is no --val")
      .add("doc-separator", "", "text files: the string between documents (\\n and \\t escapes; default: one document)")
      .add("layout", "auto", "pack (windows of the concatenated examples) | pad (one example a row, padded) | "
                             "pack-separate (whole examples packed into rows, each attending only to itself) | "
                             "auto (pack-separate for conversations, else pack)")
      .add("truncation-mode", "keep_start", "pad / pack-separate: which part of an example longer than --seq a row "
                                            "keeps: keep_start | keep_end (TRL's truncation_mode)")
      .add("allow-truncation", "false", "train although --seq cuts away more than 5% of a dataset's learned tokens")
      .add("system-message", "keep", "conversations: keep | merge (its text before the first user turn's, for "
                                     "templates without a system role) | drop")
      .add("show-labels", "0", "print the first N training rows with the learned text between [[ and ]], then exit "
                               "(the model's weights are not loaded)")
      .add("bytes", "false", "train on --data / --val files that are not UTF-8 text (invalid bytes, NUL) anyway");
}

data::Truncation truncation_flag(const Flags& flags) {
  const std::string v = flags.str("truncation-mode");
  if (v == "keep_start") return data::Truncation::KeepStart;
  if (v == "keep_end") return data::Truncation::KeepEnd;
  throw UsageError("--truncation-mode wants keep_start or keep_end, got '" + v + "'\n");
}

TrainingData load_training_data(const Flags& flags, const std::optional<data::Tokenizer>& tokenizer, int64_t seq,
                                int64_t batch, int64_t eval_batches, int32_t pad_id) {
  TrainingData out;
  out.layout = flags.str("layout");
  if (out.layout == "auto") out.layout = data::holds_conversations(flags.str("data")) ? "pack-separate" : "pack";
  if (out.layout != "pack" && out.layout != "pad" && out.layout != "pack-separate")
    throw UsageError("--layout wants auto, pack, pad or pack-separate, got '" + out.layout + "'\n");
  const data::Layout layout = out.layout == "pack"  ? data::Layout::Pack
                              : out.layout == "pad" ? data::Layout::Pad
                                                    : data::Layout::PackSeparate;
  const data::Truncation truncation = truncation_flag(flags);
  system_message_flag(flags);
  const double val_fraction = flags.number("val-fraction", 0, 1);
  if (val_fraction == 0 || val_fraction == 1)
    throw UsageError("--val-fraction wants a fraction in (0, 1), got " + flags.str("val-fraction") + "\n");
  if (flags.str("data").empty()) {
    const std::string text = generate_corpus("logbook", 1, 1 << 20);
    out.corpus = data::corpus_from_examples({std::vector<int32_t>(text.begin(), text.end())});
  } else {
    out.corpus = corpus_of(flags, "data", tokenizer);
    out.largest_id = data::max_token_id(*out.corpus);
  }
  data::SequenceDataset all(out.corpus, seq, layout, pad_id, truncation);
  if (!flags.str("val").empty()) {
    out.train = all;
    const auto val_corpus = corpus_of(flags, "val", tokenizer);
    out.largest_id = std::max(out.largest_id, data::max_token_id(*val_corpus));
    out.val = data::SequenceDataset(val_corpus, seq, layout, pad_id, truncation);
  } else {
    auto [v, t] = all.split(val_fraction);
    out.train = t, out.val = v;
  }
  const std::string data_name = flags.str("data").empty() ? "the generated corpus" : "--data '" + flags.str("data") + "'";
  const std::string seq_text = std::to_string(seq);
  if (out.train->rows() == 0)
    throw UsageError(data_name + " holds " + std::to_string(out.corpus->size()) + " tokens: no training row of --seq " +
                     seq_text + " tokens" + (flags.str("val").empty() ? " after the validation split" : "") +
                     " (lower --seq or give more data)\n");
  if (out.val->rows() == 0)
    throw UsageError(flags.str("val").empty()
                         ? "the validation split (--val-fraction " + flags.str("val-fraction") + " of " + data_name +
                               ") holds no row of --seq " + seq_text + " tokens (raise --val-fraction, lower --seq or " +
                               "pass --val)\n"
                         : "--val '" + flags.str("val") + "' holds no row of --seq " + seq_text +
                               " tokens (lower --seq or give more validation data)\n");
  const bool split = flags.str("val").empty();
  check_truncation(*out.train, split ? data_name + " (its training split)" : data_name, flags);
  check_truncation(*out.val, split ? data_name + " (its validation split)" : "--val '" + flags.str("val") + "'", flags);
  // --eval-batches x --batch rows validate: the head of the validation rows that split leaves.
  const int64_t val_limit = eval_batches * batch, val_all = out.val->rows();
  if (eval_batches > 0 && val_limit < val_all)
    out.val = out.val->split(static_cast<double>(val_all - val_limit) / static_cast<double>(val_all)).second;
  return out;
}

void show_labels(const TrainingData& d, const std::optional<data::Tokenizer>& tokenizer, int64_t n, int64_t seq,
                 data::Truncation truncation) {
  const bool colour = isatty(STDOUT_FILENO) != 0;
  const char *open = colour ? "\033[1;32m" : "[[", *close = colour ? "\033[0m" : "]]";
  auto text = [&](const std::vector<int32_t>& ids) {
    // Special tokens shown: a template's end of turn is learned too.
    return printable(tokenizer ? decode_lenient(*tokenizer, ids, /*skip_special_tokens=*/false)
                               : std::string(ids.begin(), ids.end()),
                     false);
  };
  const int64_t shown = std::min(n, d.corpus->examples());
  std::printf("the first %lld of %lld examples as the rows hold them (%s, --seq %lld), learned text %s...%s:\n",
              static_cast<long long>(shown), static_cast<long long>(d.corpus->examples()), d.layout.c_str(),
              static_cast<long long>(seq), open, close);
  for (int64_t i = 0; i < shown; ++i) {
    auto [b, e] = d.corpus->example(i);
    // Pack rows run across examples: the whole example is shown; pad and pack-separate cut it at seq.
    const int64_t len = d.layout == "pack" ? e - b : std::min(seq, e - b);
    const int64_t from = truncation == data::Truncation::KeepEnd ? e - len : b;
    std::vector<int32_t> ids(static_cast<size_t>(len)), labels(ids.size());
    d.corpus->read(from, len, ids.data(), labels.data());
    int64_t learned = 0;
    std::string line;
    for (size_t t = 0; t < ids.size();) {
      const bool on = labels[t] != data::kIgnoreIndex;
      size_t end = t;
      while (end < ids.size() && (labels[end] != data::kIgnoreIndex) == on) ++end;
      const std::string piece = text(std::vector<int32_t>(ids.begin() + static_cast<int64_t>(t), ids.begin() + static_cast<int64_t>(end)));
      line += on ? open + piece + close : piece;
      learned += on ? static_cast<int64_t>(end - t) : 0;
      t = end;
    }
    std::printf("--- example %lld: %lld tokens%s, %lld learned\n%s\n", static_cast<long long>(i),
                static_cast<long long>(len),
                len < e - b ? (" (of " + std::to_string(e - b) + ", cut)").c_str() : "", static_cast<long long>(learned),
                line.c_str());
  }
}

}  // namespace examples
