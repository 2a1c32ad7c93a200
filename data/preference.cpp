#include "data/preference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>

#include "core/error.h"
#include "core/factory.h"
#include "data/chat_dataset.h"
#include "data/chat_rows.h"

namespace tg::data {
namespace {

// A row's prompt and its completions, as text or as conversations.
struct RowTexts {
  bool conversational = false;
  std::string prompt{};
  std::vector<std::string> completions{};
  std::vector<ChatMessage> prompt_messages{};
  std::vector<std::vector<ChatMessage>> completion_messages{};
};

// Reads `fields` of a row (the first the prompt) as text or as message lists, the first row
// deciding which; empty completions and a row of the other kind are errors naming the field.
RowTexts row_texts(const JsonlRow& row, std::span<const char* const> fields, bool conversational, const char* op) {
  RowTexts out{.conversational = conversational};
  const json::Value& v = row.value;
  if (!v.find("prompt") && fields.size() > 1 && v.find(fields[1]))
    fail(op, row.where, " has no \"prompt\" (TRL's implicit-prompt rows, the prompt inside \"", fields[1],
         "\", are not read: give the prompt a field of its own)");
  for (size_t i = 0; i < fields.size(); ++i) {
    const char* field = fields[i];
    const json::Value* f = v.find(field);
    TG_CHECK(f, op, row.where, " has no \"", field, "\"");
    TG_CHECK(conversational ? f->is_array() : f->is_string(), op, row.where, ": \"", field, "\" wants ",
             conversational ? "a list of {\"role\", \"content\"} messages, as the file's first row has"
                            : "a string, as the file's first row has",
             ", got ", json::Value::type_name(f->type()));
    if (conversational) {
      std::vector<ChatMessage> m = messages_of(*f, op, row.where, field);
      TG_CHECK(i == 0 || !m.empty(), op, row.where, ": \"", field, "\" is an empty conversation");
      if (i == 0) out.prompt_messages = std::move(m);
      else out.completion_messages.push_back(std::move(m));
    } else {
      TG_CHECK(i == 0 || !f->as_string().empty(), op, row.where, ": \"", field, "\" is empty (nothing to learn)");
      if (i == 0) out.prompt = f->as_string();
      else out.completions.push_back(f->as_string());
    }
  }
  return out;
}

// The rows' prompts and completions as token ids, as TRL encodes them (see the header). Returns
// per row {prompt, completion 1, completion 2, ...}.
std::vector<std::vector<std::vector<int32_t>>> encode_rows(const std::vector<RowTexts>& rows, const Tokenizer& tok,
                                                           const std::string& path, const TextOptions& options,
                                                           const char* op) {
  std::vector<std::string> prompts, wholes;
  const bool conversational = !rows.empty() && rows.front().conversational;
  std::string eos_text;
  if (conversational) {
    TG_CHECK(tok.chat_template() != nullptr, op, "'", path, "' holds conversations but the tokenizer (",
             tok.description(), ") has no chat template");
  } else {
    TG_CHECK(tok.eos_token_id().has_value(), op, "the tokenizer (", tok.description(),
             ") has no EOS token to end the completions with (tokenizer_config.json's eos_token)");
    eos_text = tok.id_to_token(*tok.eos_token_id());
  }
  for (const RowTexts& r : rows) {
    if (conversational) {
      prompts.push_back(tok.apply_chat_template(r.prompt_messages, {.add_generation_prompt = true, .limits = {}}));
      for (const auto& c : r.completion_messages) {
        std::vector<ChatMessage> whole = r.prompt_messages;
        whole.insert(whole.end(), c.begin(), c.end());
        wholes.push_back(tok.apply_chat_template(whole));
      }
    } else {
      prompts.push_back(r.prompt);
      for (const std::string& c : r.completions)
        wholes.push_back(r.prompt + c + (c.ends_with(eos_text) ? "" : eos_text));
    }
  }
  const auto p = tok.encode_batch(prompts, !conversational), w = tok.encode_batch(wholes, !conversational);
  std::vector<std::vector<std::vector<int32_t>>> out;
  int64_t mismatched = 0, first = -1;
  for (size_t i = 0, k = 0; i < rows.size(); ++i) {
    std::vector<std::vector<int32_t>> row{p[i]};
    const size_t n = conversational ? rows[i].completion_messages.size() : rows[i].completions.size();
    for (size_t c = 0; c < n; ++c, ++k) {
      const std::vector<int32_t>& whole = w[k];
      const size_t span = std::min(p[i].size(), whole.size());
      if (span < p[i].size() || !std::equal(p[i].begin(), p[i].end(), whole.begin())) {
        if (mismatched++ == 0) first = static_cast<int64_t>(i);
      }
      row.emplace_back(whole.begin() + static_cast<std::ptrdiff_t>(span), whole.end());
    }
    out.push_back(std::move(row));
  }
  if (mismatched > 0) {
    const std::string note = "'" + path + "': in " + std::to_string(mismatched) + " rows (the first is row " +
                             std::to_string(first) + ") the prompt's own tokens are not the start of the prompt + "
                             "completion's; the completion is still what follows the prompt's token count (as TRL)";
    if (options.warn) options.warn(note);
    else std::cerr << "warning: " << note << "\n";
  }
  return out;
}

template <class Row>
std::vector<Row> read_rows(const std::string& path, const Tokenizer& tok, const TextOptions& options, const char* op,
                           std::span<const char* const> fields,
                           const std::function<Row(const JsonlRow&, std::vector<std::vector<int32_t>>&)>& make) {
  const std::vector<JsonlRow> rows = read_jsonl_objects(path, options, op);
  TG_CHECK(!rows.empty(), op, "'", path, "' holds no rows");
  const json::Value* first_prompt = rows.front().value.find("prompt");
  const bool conversational = first_prompt && first_prompt->is_array();
  std::vector<RowTexts> texts;
  for (const JsonlRow& row : rows) texts.push_back(row_texts(row, fields, conversational, op));
  auto encoded = encode_rows(texts, tok, path, options, op);
  std::vector<Row> out;
  for (size_t i = 0; i < rows.size(); ++i) out.push_back(make(rows[i], encoded[i]));
  return out;
}

// The split point of `rows` for the last `fraction`; tg::Error naming `who` unless both parts have rows.
int64_t split_at(int64_t rows, double fraction, const char* who) {
  TG_CHECK(fraction > 0 && fraction < 1, who, "split fraction must be in (0, 1), got ", fraction);
  const int64_t last = static_cast<int64_t>(std::ceil(static_cast<double>(rows) * fraction));
  TG_CHECK(last >= 1 && last < rows, who, "splitting ", rows, " rows by ", fraction, " leaves a part empty");
  return rows - last;
}

}  // namespace

void TruncationOptions::validate(const char* who) const {
  TG_CHECK(max_length >= 0, who, "max_length must be >= 0 (0: no limit), got ", max_length);
  TG_CHECK(max_prompt_length >= 0, who, "max_prompt_length must be >= 0 (0: no limit), got ", max_prompt_length);
  TG_CHECK(max_completion_length >= 0, who, "max_completion_length must be >= 0 (0: no limit), got ",
           max_completion_length);
  TG_CHECK(truncation_mode == "keep_start" || truncation_mode == "keep_end", who,
           "truncation_mode must be 'keep_start' or 'keep_end', got '", truncation_mode, "'");
}

int64_t Completion::predicted() const {
  return std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - std::max<int64_t>(prompt_tokens, 1));
}

Completion truncated(std::span<const int32_t> prompt, std::span<const int32_t> completion,
                     const TruncationOptions& o) {
  if (o.max_prompt_length > 0 && static_cast<int64_t>(prompt.size()) > o.max_prompt_length)
    prompt = prompt.last(static_cast<size_t>(o.max_prompt_length));
  if (o.max_completion_length > 0 && static_cast<int64_t>(completion.size()) > o.max_completion_length)
    completion = completion.first(static_cast<size_t>(o.max_completion_length));
  Completion c{{prompt.begin(), prompt.end()}, static_cast<int64_t>(prompt.size())};
  c.ids.insert(c.ids.end(), completion.begin(), completion.end());
  const int64_t n = static_cast<int64_t>(c.ids.size());
  if (o.max_length > 0 && n > o.max_length) {
    if (o.truncation_mode == "keep_end") {
      c.ids.erase(c.ids.begin(), c.ids.begin() + (n - o.max_length));
      c.prompt_tokens = std::max<int64_t>(0, c.prompt_tokens - (n - o.max_length));
    } else {
      c.ids.resize(static_cast<size_t>(o.max_length));
      c.prompt_tokens = std::min(c.prompt_tokens, o.max_length);
    }
  }
  if (c.predicted() == 0) c.ids.clear();
  return c;
}

std::pair<Tensor, Tensor> padded_rows(std::span<const Completion* const> completions, int32_t pad_id, Device device) {
  size_t longest = 1;
  for (const Completion* c : completions) longest = std::max(longest, c->ids.size());
  const int64_t n = static_cast<int64_t>(completions.size()), T = static_cast<int64_t>(longest);
  std::vector<int64_t> ids(static_cast<size_t>(n * T), pad_id), labels(static_cast<size_t>(n * T), kIgnoreIndex);
  for (int64_t r = 0; r < n; ++r) {
    const Completion& c = *completions[static_cast<size_t>(r)];
    for (size_t t = 0; t < c.ids.size(); ++t) {
      ids[static_cast<size_t>(r * T) + t] = c.ids[t];
      if (static_cast<int64_t>(t) >= c.prompt_tokens) labels[static_cast<size_t>(r * T) + t] = c.ids[t];
    }
  }
  return {from_vector(ids, {n, T}, device), from_vector(labels, {n, T}, device)};
}

std::vector<PreferencePair> read_preference_jsonl(const std::string& path, const Tokenizer& tok,
                                                  const TextOptions& options) {
  const char* op = "read_preference_jsonl";
  static constexpr const char* kFields[] = {"prompt", "chosen", "rejected"};
  return read_rows<PreferencePair>(
      path, tok, options, op, kFields, [&](const JsonlRow& row, std::vector<std::vector<int32_t>>& ids) {
        TG_CHECK(json::dump(row.value.at("chosen")) != json::dump(row.value.at("rejected")), op, row.where,
                 ": \"chosen\" equals \"rejected\" (the pair prefers nothing)");
        return PreferencePair{std::move(ids[0]), std::move(ids[1]), std::move(ids[2])};
      });
}

std::vector<UnpairedExample> read_unpaired_jsonl(const std::string& path, const Tokenizer& tok,
                                                 const TextOptions& options) {
  const char* op = "read_unpaired_jsonl";
  static constexpr const char* kFields[] = {"prompt", "completion"};
  return read_rows<UnpairedExample>(
      path, tok, options, op, kFields, [&](const JsonlRow& row, std::vector<std::vector<int32_t>>& ids) {
        const json::Value* label = row.value.find("label");
        TG_CHECK(label && label->is_bool(), op, row.where, ": \"label\" wants true (desirable) or false, got ",
                 label ? json::Value::type_name(label->type()) : "nothing");
        return UnpairedExample{std::move(ids[0]), std::move(ids[1]), label->as_bool()};
      });
}

// ---------------------------------------------------------------- pairs

PreferenceDataset::PreferenceDataset(std::span<const PreferencePair> pairs, TruncationOptions truncation,
                                     int32_t pad_id)
    : pad_id_(pad_id) {
  truncation.validate("PreferenceDataset");
  for (const PreferencePair& p : pairs) {
    Completion c = truncated(p.prompt, p.chosen, truncation), r = truncated(p.prompt, p.rejected, truncation);
    if (c.ids.empty() || r.ids.empty()) {
      ++dropped_;
      continue;
    }
    longest_ = std::max({longest_, static_cast<int64_t>(c.ids.size()), static_cast<int64_t>(r.ids.size())});
    chosen_.push_back(std::move(c));
    rejected_.push_back(std::move(r));
  }
}

std::vector<int64_t> PreferenceDataset::batch_rows(int64_t index, int64_t batch_size, uint64_t seed) const {
  return order_.batch(index, batch_size, rows(), seed, "PreferenceDataset::batch");
}

PreferenceBatch PreferenceDataset::batch(int64_t index, int64_t batch_size, uint64_t seed, Device device) const {
  return rows_batch(batch_rows(index, batch_size, seed), device);
}

PreferenceBatch PreferenceDataset::rows_batch(std::span<const int64_t> rows, Device device) const {
  PreferenceBatch b{.rows = {rows.begin(), rows.end()}};
  std::vector<const Completion*> seqs;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t r : rows) {
      TG_CHECK(r >= 0 && r < this->rows(), "PreferenceDataset", "row ", r, " outside the ", this->rows(), " pairs");
      seqs.push_back(pass == 0 ? &chosen(r) : &rejected(r));
      b.completion_tokens.push_back(seqs.back()->predicted());
      b.tokens += static_cast<int64_t>(seqs.back()->ids.size());
    }
  std::tie(b.ids, b.labels) = padded_rows(seqs, pad_id_, device);
  return b;
}

std::pair<PreferenceDataset, PreferenceDataset> PreferenceDataset::split(double fraction) const {
  const int64_t at = split_at(rows(), fraction, "PreferenceDataset::split");
  PreferenceDataset last, head;
  for (PreferenceDataset* part : {&last, &head}) {
    const bool is_head = part == &head;
    const auto b = static_cast<std::ptrdiff_t>(is_head ? 0 : at), e = static_cast<std::ptrdiff_t>(is_head ? at : rows());
    part->chosen_.assign(chosen_.begin() + b, chosen_.begin() + e);
    part->rejected_.assign(rejected_.begin() + b, rejected_.begin() + e);
    part->pad_id_ = pad_id_;
    for (std::ptrdiff_t i = b; i < e; ++i)
      part->longest_ = std::max({part->longest_, static_cast<int64_t>(chosen_[i].ids.size()),
                                 static_cast<int64_t>(rejected_[i].ids.size())});
  }
  return {std::move(last), std::move(head)};
}

// ---------------------------------------------------------------- unpaired

UnpairedPreferenceDataset::UnpairedPreferenceDataset(std::span<const UnpairedExample> examples,
                                                     TruncationOptions truncation, int32_t pad_id)
    : truncation_(std::move(truncation)), pad_id_(pad_id) {
  truncation_.validate("UnpairedPreferenceDataset");
  for (const UnpairedExample& e : examples) {
    Completion c = truncated(e.prompt, e.completion, truncation_);
    if (c.ids.empty()) {
      ++dropped_;
      continue;
    }
    longest_ = std::max(longest_, static_cast<int64_t>(c.ids.size()));
    prompts_.push_back(e.prompt);
    completions_.push_back(e.completion);
    sequences_.push_back(std::move(c));
    labels_.push_back(e.label);
  }
}

int64_t UnpairedPreferenceDataset::desirable() const {
  return static_cast<int64_t>(std::count(labels_.begin(), labels_.end(), true));
}

std::vector<int64_t> UnpairedPreferenceDataset::batch_rows(int64_t index, int64_t batch_size, uint64_t seed) const {
  return order_.batch(index, batch_size, rows(), seed, "UnpairedPreferenceDataset::batch");
}

UnpairedBatch UnpairedPreferenceDataset::batch(int64_t index, int64_t batch_size, uint64_t seed, Device device) const {
  return rows_batch(batch_rows(index, batch_size, seed), device);
}

UnpairedBatch UnpairedPreferenceDataset::rows_batch(std::span<const int64_t> rows, Device device) const {
  UnpairedBatch b{.rows = {rows.begin(), rows.end()}};
  std::vector<const Completion*> seqs, kl_seqs;
  std::vector<Completion> kl(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i], other = rows[(i + rows.size() - 1) % rows.size()];
    TG_CHECK(r >= 0 && r < this->rows(), "UnpairedPreferenceDataset", "row ", r, " outside the ", this->rows(),
             " examples");
    seqs.push_back(&sequence(r));
    b.tokens += static_cast<int64_t>(seqs.back()->ids.size());
    b.desirable.push_back(label(r));
    kl[i] = truncated(prompts_[static_cast<size_t>(r)], completions_[static_cast<size_t>(other)], truncation_);
    kl_seqs.push_back(&kl[i]);
  }
  std::tie(b.ids, b.labels) = padded_rows(seqs, pad_id_, device);
  std::tie(b.kl_ids, b.kl_labels) = padded_rows(kl_seqs, pad_id_, device);
  return b;
}

std::pair<UnpairedPreferenceDataset, UnpairedPreferenceDataset> UnpairedPreferenceDataset::split(double fraction) const {
  const int64_t at = split_at(rows(), fraction, "UnpairedPreferenceDataset::split");
  UnpairedPreferenceDataset last, head;
  for (UnpairedPreferenceDataset* part : {&last, &head}) {
    const bool is_head = part == &head;
    const auto b = static_cast<std::ptrdiff_t>(is_head ? 0 : at), e = static_cast<std::ptrdiff_t>(is_head ? at : rows());
    part->prompts_.assign(prompts_.begin() + b, prompts_.begin() + e);
    part->completions_.assign(completions_.begin() + b, completions_.begin() + e);
    part->sequences_.assign(sequences_.begin() + b, sequences_.begin() + e);
    part->labels_.assign(labels_.begin() + b, labels_.begin() + e);
    part->truncation_ = truncation_;
    part->pad_id_ = pad_id_;
    for (std::ptrdiff_t i = b; i < e; ++i)
      part->longest_ = std::max(part->longest_, static_cast<int64_t>(sequences_[i].ids.size()));
  }
  return {std::move(last), std::move(head)};
}

// ---------------------------------------------------------------- prompts

std::vector<PromptExample> read_prompt_jsonl(const std::string& path, const Tokenizer& tok, const TextOptions& options) {
  const char* op = "read_prompt_jsonl";
  const std::vector<JsonlRow> rows = read_jsonl_objects(path, options, op);
  TG_CHECK(!rows.empty(), op, "'", path, "' holds no rows");
  const json::Value* first_prompt = rows.front().value.find("prompt");
  const bool conversational = first_prompt && first_prompt->is_array();
  TG_CHECK(!conversational || tok.chat_template() != nullptr, op, "'", path, "' holds conversations but the tokenizer (",
           tok.description(), ") has no chat template");
  static constexpr const char* kFields[] = {"prompt"};
  std::vector<std::string> texts;
  for (const JsonlRow& row : rows) {
    RowTexts t = row_texts(row, kFields, conversational, op);
    texts.push_back(conversational ? tok.apply_chat_template(t.prompt_messages, {.add_generation_prompt = true, .limits = {}})
                                   : t.prompt);
    TG_CHECK(!texts.back().empty(), op, row.where, ": \"prompt\" is empty (generation needs a first token)");
  }
  const auto ids = tok.encode_batch(texts, !conversational);
  std::vector<PromptExample> out;
  for (size_t i = 0; i < rows.size(); ++i) out.push_back({ids[i], texts[i], rows[i].value, rows[i].where});
  return out;
}

}  // namespace tg::data
