#include "data/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <set>

#include "core/error.h"
#include "core/factory.h"
#include "core/limits.h"
#include "core/detail/philox.h"
#include "data/chat_dataset.h"
#include "core/detail/utf8.h"
#include "io/file.h"
#include "io/json.h"

namespace tg::data {
namespace {

class MemoryCorpus : public TokenCorpus {
 public:
  MemoryCorpus(std::vector<std::vector<int32_t>> ids, std::vector<std::vector<int32_t>> labels) {
    TG_CHECK(labels.empty() || labels.size() == ids.size(), "corpus_from_examples", ids.size(), " examples, ",
             labels.size(), " label lists");
    starts_.push_back(0);
    for (size_t i = 0; i < ids.size(); ++i) {
      TG_CHECK(labels.empty() || labels[i].size() == ids[i].size(), "corpus_from_examples", "example ", i, " has ",
               ids[i].size(), " ids, ", labels[i].size(), " labels");
      ids_.insert(ids_.end(), ids[i].begin(), ids[i].end());
      const auto& l = labels.empty() ? ids[i] : labels[i];
      labels_.insert(labels_.end(), l.begin(), l.end());
      starts_.push_back(static_cast<int64_t>(ids_.size()));
    }
  }
  int64_t size() const override { return static_cast<int64_t>(ids_.size()); }
  int64_t examples() const override { return static_cast<int64_t>(starts_.size()) - 1; }
  std::pair<int64_t, int64_t> example(int64_t i) const override { return {starts_[i], starts_[i + 1]}; }
  void read(int64_t begin, int64_t n, int32_t* ids, int32_t* labels) const override {
    if (ids) std::copy_n(ids_.begin() + begin, n, ids);
    if (labels) std::copy_n(labels_.begin() + begin, n, labels);
  }

 private:
  std::vector<int32_t> ids_, labels_;
  std::vector<int64_t> starts_;
};

constexpr int32_t kMagicU16 = 20240520, kMagicU32 = 20240801;  // llm.c's GPT-2 and Llama-3 shards
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

// Read with pread, not mapped: a file truncated while in use (another process rewriting it)
// is a tg::Error at the read, where a mapping would end the process with SIGBUS.
class TokenFile : public TokenCorpus {
 public:
  TokenFile(const std::string& path, TokenWidth width) : path_(path) {
    fd_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    TG_CHECK(fd_.fd >= 0, "open_token_file", "cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    TG_CHECK(::fstat(fd_.fd, &st) == 0 && S_ISREG(st.st_mode), "open_token_file", "'", path, "' is not a regular file");
    const size_t bytes = static_cast<size_t>(st.st_size);
    int32_t header[3] = {0, 0, 0};
    if (bytes >= kHeaderBytes) read_at(0, header, sizeof header);
    const bool llmc = header[0] == kMagicU16 || header[0] == kMagicU32;
    if (width == TokenWidth::Auto) {
      TG_CHECK(llmc, "open_token_file", "'", path, "' has no llm.c header (magic ", kMagicU16, " or ", kMagicU32,
               "); for a headerless token array say its width (uint16 or uint32)");
      width = header[0] == kMagicU16 ? TokenWidth::U16 : TokenWidth::U32;
    }
    width_ = width == TokenWidth::U16 ? 2 : 4;
    offset_ = llmc ? kHeaderBytes : 0;
    const size_t payload = bytes - offset_;
    TG_CHECK(payload % width_ == 0, "open_token_file", "'", path, "' holds ", payload, " bytes of tokens, not a whole "
             "number of ", width_, "-byte tokens");
    tokens_ = static_cast<int64_t>(payload / width_);
    if (llmc)
      TG_CHECK(header[2] == tokens_, "open_token_file", "'", path, "': its header counts ", header[2],
               " tokens, the file holds ", tokens_, " (truncated or not an llm.c shard)");
  }
  int64_t size() const override { return tokens_; }
  int64_t examples() const override { return 1; }
  std::pair<int64_t, int64_t> example(int64_t) const override { return {0, tokens_}; }
  void read(int64_t begin, int64_t n, int32_t* ids, int32_t* labels) const override {
    TG_CHECK(begin >= 0 && n >= 0 && begin + n <= tokens_, "open_token_file", "tokens [", begin, ", ", begin + n,
             ") outside the ", tokens_, " of '", path_, "'");
    std::vector<uint8_t> raw(static_cast<size_t>(n) * width_);
    read_at(offset_ + static_cast<size_t>(begin) * width_, raw.data(), raw.size());
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* p = raw.data() + i * width_;
      uint32_t v = 0;
      if (width_ == 2) {
        uint16_t w;
        std::memcpy(&w, p, 2);
        v = w;
      } else {
        std::memcpy(&v, p, 4);
      }
      if (ids) ids[i] = static_cast<int32_t>(v);
      if (labels) labels[i] = static_cast<int32_t>(v);
    }
  }

 private:
  void read_at(size_t offset, void* out, size_t bytes) const {
    auto* p = static_cast<uint8_t*>(out);
    while (bytes > 0) {
      const ssize_t got = ::pread(fd_.fd, p, bytes, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      TG_CHECK(got > 0, "open_token_file", "'", path_, "' ", got < 0 ? std::string("cannot be read: ") + std::strerror(errno)
               : std::string("ended early: it was truncated after it was opened"));
      p += got, offset += static_cast<size_t>(got), bytes -= static_cast<size_t>(got);
    }
  }

  std::string path_;
  struct Fd {
    int fd = -1;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } fd_;  // closed also when the constructor throws
  size_t offset_ = 0;
  int64_t tokens_ = 0;
  size_t width_ = 2;
};

std::string read_bytes(const std::string& path) {
  std::vector<uint8_t> b = io::read_file(path);
  return std::string(b.begin(), b.end());
}

void check_text(const std::string& bytes, const std::string& path, const TextOptions& options, const char* op) {
  if (options.allow_binary) return;
  if (auto problem = text_problem(bytes)) fail(op, "'", path, "' is not text: ", *problem, " (allow_binary reads it anyway)");
}

int32_t eos_of(const Tokenizer& tok, const char* op) {
  std::optional<int32_t> eos = tok.eos_token_id();
  TG_CHECK(eos.has_value(), op, "the tokenizer (", tok.description(), ") has no EOS token to end documents with "
           "(tokenizer_config.json's eos_token)");
  return *eos;
}

}  // namespace

std::shared_ptr<const TokenCorpus> corpus_from_examples(std::vector<std::vector<int32_t>> ids,
                                                        std::vector<std::vector<int32_t>> labels) {
  return std::make_shared<MemoryCorpus>(std::move(ids), std::move(labels));
}

std::optional<std::string> text_problem(std::string_view bytes) {
  const size_t valid = utf8::valid_prefix(bytes);
  const size_t nul = bytes.substr(0, valid).find('\0');
  const size_t at = std::min(valid, nul);
  if (at == bytes.size()) return std::nullopt;
  const int64_t line = 1 + std::count(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  const std::string what = at == nul ? "a NUL byte at byte " + std::to_string(at) : utf8::invalid_at(bytes);
  return what + ", line " + std::to_string(line);
}

std::shared_ptr<const TokenCorpus> tokenize_text_file(const std::string& path, const Tokenizer& tok,
                                                      const TextOptions& options) {
  const std::string text = read_bytes(path);
  check_text(text, path, options, "tokenize_text_file");
  const int32_t eos = eos_of(tok, "tokenize_text_file");
  std::vector<std::string> docs;
  if (options.separator.empty()) {
    docs.push_back(text);
  } else {
    for (size_t at = 0;;) {
      const size_t next = text.find(options.separator, at);
      std::string doc = text.substr(at, next == std::string::npos ? std::string::npos : next - at);
      if (!doc.empty()) docs.push_back(std::move(doc));
      if (next == std::string::npos) break;
      at = next + options.separator.size();
    }
  }
  std::vector<std::vector<int32_t>> ids = tok.encode_batch(docs);
  for (auto& d : ids) d.push_back(eos);
  return corpus_from_examples(std::move(ids));
}

std::vector<JsonlRow> read_jsonl_objects(const std::string& path, const TextOptions& options, const char* op) {
  const std::string text = read_bytes(path);
  check_text(text, path, options, op);
  std::vector<JsonlRow> rows;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    JsonlRow row{json::Value(), "'" + path + "' line " + std::to_string(line_no), line_no};
    try {
      row.value = json::parse(line);
    } catch (const Error& e) {
      fail(op, row.where, ": ", e.what());
    }
    TG_CHECK(row.value.is_object(), op, row.where, " wants a JSON object, got ", json::Value::type_name(row.value.type()));
    rows.push_back(std::move(row));
  }
  return rows;
}

std::shared_ptr<const TokenCorpus> tokenize_jsonl_file(const std::string& path, const Tokenizer& tok,
                                                       const TextOptions& options) {
  const std::vector<JsonlRow> rows = read_jsonl_objects(path, options, "tokenize_jsonl_file");
  if (!rows.empty() && is_conversation_row(rows.front().value)) return tokenize_chat_rows(rows, tok, path, options);
  const int32_t eos = eos_of(tok, "tokenize_jsonl_file");
  std::vector<std::string> prompts, completions;
  std::vector<bool> has_prompt;
  std::vector<size_t> line_of;
  for (const JsonlRow& row : rows) {
    const json::Value& v = row.value;  // named, not bound: lambdas capture them (clang 14)
    const std::string& where = row.where;
    auto str = [&](const char* key) -> const std::string& {
      const json::Value& f = v.at(key);
      TG_CHECK(f.is_string(), "tokenize_jsonl_file", where, ": \"", key, "\" wants a string, got ",
               json::Value::type_name(f.type()));
      return f.as_string();
    };
    line_of.push_back(row.line);
    if (v.find("prompt") || v.find("completion")) {
      TG_CHECK(v.find("prompt") && v.find("completion"), "tokenize_jsonl_file", where, " has \"",
               v.find("prompt") ? "prompt" : "completion", "\" without \"", v.find("prompt") ? "completion" : "prompt", "\"");
      prompts.push_back(str("prompt"));
      completions.push_back(str("completion"));
      has_prompt.push_back(true);
    } else {
      TG_CHECK(v.find("text"), "tokenize_jsonl_file", where, " has neither \"text\" nor \"prompt\" and \"completion\"",
               v.find("messages") ? " (\"messages\" rows are read only when the first row has \"messages\")" : "");
      prompts.emplace_back();
      completions.push_back(str("text"));
      has_prompt.push_back(false);
    }
  }
  TG_CHECK(!completions.empty(), "tokenize_jsonl_file", "'", path, "' holds no examples");
  // As TRL: prompt + completion encoded as one text (the tokens inference sees), the prompt's
  // length in its own encoding the span not learned.
  std::vector<std::string> whole(completions.size()), prompt_texts;
  for (size_t i = 0; i < completions.size(); ++i) {
    whole[i] = prompts[i] + completions[i];
    if (has_prompt[i]) prompt_texts.push_back(prompts[i]);
  }
  const auto w = tok.encode_batch(whole), p = tok.encode_batch(prompt_texts);
  std::vector<std::vector<int32_t>> ids(completions.size()), labels(completions.size());
  size_t not_prefix = 0, first_line = 0;
  for (size_t i = 0, ip = 0; i < completions.size(); ++i) {
    ids[i] = w[i];
    ids[i].push_back(eos);
    labels[i] = ids[i];
    if (!has_prompt[i]) continue;
    const std::vector<int32_t>& prompt = p[ip++];
    const size_t span = std::min(prompt.size(), w[i].size());
    if (!std::equal(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(span), w[i].begin()) ||
        span < prompt.size())
      if (not_prefix++ == 0) first_line = line_of[i];
    std::fill_n(labels[i].begin(), span, kIgnoreIndex);
  }
  if (not_prefix > 0) {
    const std::string message = "tokenize_jsonl_file: '" + path + "': in " + std::to_string(not_prefix) + " of " +
                                std::to_string(prompt_texts.size()) + " prompt / completion examples (the first at line " +
                                std::to_string(first_line) + ") the prompt's own tokens are not the start of the prompt + "
                                "completion's; the prompt's length is still the span not learned, so a token at the "
                                "boundary may be learned or not (as TRL does it; a completion starting with a space "
                                "usually fixes it)";
    if (options.warn) options.warn(message);
    else std::cerr << "warning: " << message << "\n";
  }
  return corpus_from_examples(std::move(ids), std::move(labels));
}

std::shared_ptr<const TokenCorpus> open_token_file(const std::string& path, TokenWidth width) {
  return std::make_shared<TokenFile>(path, width);
}

int64_t max_token_id(const TokenCorpus& corpus) {
  int64_t top = -1;
  std::vector<int32_t> chunk;
  for (int64_t at = 0, n = corpus.size(); at < n; at += 1 << 16) {
    chunk.resize(static_cast<size_t>(std::min<int64_t>(1 << 16, n - at)));
    corpus.read(at, static_cast<int64_t>(chunk.size()), chunk.data(), nullptr);
    for (int32_t id : chunk) top = std::max<int64_t>(top, static_cast<uint32_t>(id));  // uint32 ids above 2^31 stay large
  }
  return top;
}

void write_token_file(const std::string& path, const std::vector<int32_t>& ids) {
  const bool narrow = std::all_of(ids.begin(), ids.end(), [](int32_t v) { return v >= 0 && v < 65536; });
  for (int32_t v : ids) TG_CHECK(v >= 0, "write_token_file", "token id ", v, " is negative");
  int32_t header[256] = {};
  header[0] = narrow ? kMagicU16 : kMagicU32;
  header[1] = narrow ? 1 : 7;  // llm.c's versions for the two widths
  header[2] = static_cast<int32_t>(ids.size());
  TG_CHECK(ids.size() < (size_t{1} << 31), "write_token_file", ids.size(), " tokens do not fit an llm.c header");
  io::write_file_atomic(path, [&](const io::ChunkWriter& write) {
    write(header, sizeof header);
    std::vector<uint8_t> chunk;
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t v = static_cast<uint32_t>(ids[i]);
      if (narrow) chunk.push_back(v & 0xFF), chunk.push_back(v >> 8);
      else for (int k = 0; k < 4; ++k) chunk.push_back((v >> (8 * k)) & 0xFF);
      if (chunk.size() >= (1 << 20)) write(chunk.data(), chunk.size()), chunk.clear();
    }
    write(chunk.data(), chunk.size());
  });
}

SequenceDataset::SequenceDataset(std::shared_ptr<const TokenCorpus> corpus, int64_t seq, Layout layout, int32_t pad_id,
                                 Truncation truncation)
    : corpus_(std::move(corpus)), seq_(seq), layout_(layout), pad_id_(pad_id), truncation_(truncation) {
  TG_CHECK(seq_ >= 2, "SequenceDataset", "seq must be at least 2 (one next-token target), got ", seq_);
  TG_CHECK(seq_ <= kMaxContext, "SequenceDataset", "seq ", seq_, " is above ", kMaxContext,
           ", the longest context a model can have (a padded row holds seq tokens whatever its example's length)");
  if (layout_ == Layout::Pack) {
    row_end_ = corpus_->size() / seq_;
  } else if (layout_ == Layout::Pad) {
    row_end_ = corpus_->examples();
    for (int64_t i = 0; i < row_end_; ++i) {
      auto [b, e] = corpus_->example(i);
      truncated_ += e - b > seq_;
    }
  } else {
    pack(0, corpus_->examples());
  }
}

void SequenceDataset::pack(int64_t first_example, int64_t end_example) {
  // Best-fit decreasing: the longest example first, each into the row with the least room that
  // still takes it (a new row when none does); then each row's examples in corpus order.
  std::vector<std::pair<int64_t, int64_t>> by_length;  // (tokens, example)
  truncated_ = 0;
  for (int64_t i = first_example; i < end_example; ++i) {
    auto [b, e] = corpus_->example(i);
    truncated_ += e - b > seq_;
    if (e > b) by_length.emplace_back(std::min(seq_, e - b), i);
  }
  std::stable_sort(by_length.begin(), by_length.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::set<std::pair<int64_t, int64_t>> room;  // (tokens left, row)
  std::vector<std::vector<int64_t>> rows;
  for (const auto& [tokens, example] : by_length) {
    auto it = room.lower_bound({tokens, 0});
    int64_t row = static_cast<int64_t>(rows.size()), left = seq_;
    if (it != room.end()) {
      row = it->second, left = it->first;
      room.erase(it);
    } else {
      rows.emplace_back();
    }
    rows[row].push_back(example);
    if (left > tokens) room.insert({left - tokens, row});
  }
  auto packing = std::make_shared<Packing>();
  packing->starts.push_back(0);
  for (std::vector<int64_t>& r : rows) {
    std::sort(r.begin(), r.end());
    packing->examples.insert(packing->examples.end(), r.begin(), r.end());
    packing->starts.push_back(static_cast<int64_t>(packing->examples.size()));
  }
  packing_ = std::move(packing);
  row_begin_ = 0;
  row_end_ = static_cast<int64_t>(rows.size());
}

std::pair<SequenceDataset, SequenceDataset> SequenceDataset::split(double fraction) const {
  TG_CHECK(fraction > 0 && fraction < 1, "SequenceDataset::split", "fraction must be in (0, 1), got ", fraction);
  SequenceDataset head = *this, last = *this;
  head.order_ = ShuffledOrder();
  last.order_ = ShuffledOrder();
  if (layout_ == Layout::PackSeparate) {
    const int64_t n = corpus_->examples(), tail = static_cast<int64_t>(static_cast<double>(n) * fraction + 0.5);
    head.pack(0, n - tail);
    last.pack(n - tail, n);
    return {last, head};
  }
  const int64_t tail = static_cast<int64_t>(static_cast<double>(rows()) * fraction + 0.5);
  head.row_end_ = row_end_ - tail;
  last.row_begin_ = row_end_ - tail;
  return {last, head};
}

void SequenceDataset::fill(int64_t row, int64_t* ids, int64_t* labels, int64_t* positions) const {
  std::vector<int32_t> i32(static_cast<size_t>(seq_)), l32(static_cast<size_t>(seq_));
  int64_t n = seq_;
  if (layout_ == Layout::Pack) {
    corpus_->read(row * seq_, seq_, i32.data(), l32.data());
  } else if (layout_ == Layout::Pad) {
    auto [b, e] = corpus_->example(row);
    n = std::min(seq_, e - b);
    corpus_->read(truncation_ == Truncation::KeepEnd ? e - n : b, n, i32.data(), l32.data());
  } else {
    n = 0;
    for (int64_t k = packing_->starts[row]; k < packing_->starts[row + 1]; ++k) {
      auto [b, e] = corpus_->example(packing_->examples[k]);
      const int64_t len = std::min(seq_, e - b);
      corpus_->read(truncation_ == Truncation::KeepEnd ? e - len : b, len, i32.data() + n, l32.data() + n);
      l32[n] = kIgnoreIndex;  // not predicted from the example before
      for (int64_t t = 0; t < len; ++t) positions[n + t] = t;
      n += len;
    }
    std::fill(positions + n, positions + seq_, 0);
  }
  for (int64_t t = 0; t < seq_; ++t) {
    ids[t] = t < n ? i32[t] : pad_id_;
    labels[t] = t < n ? l32[t] : kIgnoreIndex;
  }
}

void SequenceDataset::check_batch_memory(int64_t rows, const char* op, const std::string& what) const {
  // make()'s int64 ids, labels (and position ids), and fill()'s int32 row.
  const double per_token = layout_ == Layout::PackSeparate ? 24 : 16;
  check_host_memory(static_cast<double>(rows) * static_cast<double>(seq_) * per_token + 8.0 * static_cast<double>(seq_),
                    op, what + " of " + std::to_string(seq_) + " tokens");
}

Batch SequenceDataset::make(const std::vector<int64_t>& rows, Device device) const {
  const int64_t b = static_cast<int64_t>(rows.size());
  const bool separate = layout_ == Layout::PackSeparate;
  std::vector<int64_t> ids(static_cast<size_t>(b * seq_)), labels(ids.size()), positions(separate ? ids.size() : 0);
  Batch out;
  for (int64_t r = 0; r < b; ++r) {
    fill(row_begin_ + rows[r], ids.data() + r * seq_, labels.data() + r * seq_,
         separate ? positions.data() + r * seq_ : nullptr);
    for (int64_t t = 1; t < seq_; ++t) out.targets += labels[r * seq_ + t] != kIgnoreIndex;
  }
  out.ids = from_vector(ids, {b, seq_}, device);
  out.labels = from_vector(labels, {b, seq_}, device);
  if (separate) out.position_ids = from_vector(positions, {b, seq_}, device);
  return out;
}

ShuffledOrder::ShuffledOrder() : state_(std::make_shared<State>()) {}

std::vector<int64_t> ShuffledOrder::batch(int64_t index, int64_t batch_size, int64_t n, uint64_t seed,
                                          const char* who) const {
  TG_CHECK(n > 0, who, "no rows to draw a batch from");
  TG_CHECK(batch_size >= 1, who, "batch_size must be at least 1, got ", batch_size);
  TG_CHECK(index >= 0 && index <= (INT64_MAX - batch_size) / batch_size, who, "batch index ", index, " of ", batch_size,
           " rows is outside [0, ", (INT64_MAX - batch_size) / batch_size, "]");
  std::vector<int64_t> picked;
  std::lock_guard<std::mutex> lock(state_->mutex);
  State& s = *state_;
  for (int64_t k = 0; k < batch_size; ++k) {
    const int64_t pos = index * batch_size + k, epoch = pos / n;
    if (s.epoch != epoch || s.seed != seed || s.n != n) {
      // Fisher-Yates from Philox(seed, epoch): the order depends on nothing else.
      s.perm.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) s.perm[i] = i;
      for (int64_t i = n - 1; i > 0; --i) {
        const Philox4 r = philox(seed, static_cast<uint64_t>(i), static_cast<uint64_t>(epoch) + 1);
        const uint64_t u = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
        std::swap(s.perm[i], s.perm[u % static_cast<uint64_t>(i + 1)]);
      }
      s.epoch = epoch, s.seed = seed, s.n = n;
    }
    picked.push_back(s.perm[pos % n]);
  }
  return picked;
}

Batch SequenceDataset::batch(int64_t index, int64_t batch_size, uint64_t seed, Device device) const {
  TG_CHECK(rows() > 0, "SequenceDataset::batch", "no rows of ", seq_, " tokens");
  check_batch_memory(batch_size, "SequenceDataset::batch", std::to_string(batch_size) + " rows");
  return make(order_.batch(index, batch_size, rows(), seed, "SequenceDataset::batch"), device);
}

Batch SequenceDataset::rows_batch(int64_t first, int64_t n, Device device) const {
  TG_CHECK(first >= 0 && n >= 0 && first <= rows() && n <= rows() - first, "SequenceDataset::rows_batch", n,
           " rows from row ", first, " reach outside the ", rows(), " rows");
  check_batch_memory(n, "SequenceDataset::rows_batch", std::to_string(n) + " rows");
  std::vector<int64_t> picked(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) picked[i] = first + i;
  return make(picked, device);
}

}  // namespace tg::data
