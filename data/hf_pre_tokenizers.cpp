// tokenizer.json pre-tokenizers: Sequence, Split, ByteLevel (last), Metaspace, Digits,
// WhitespaceSplit; the split behaviours as tokenizers' NormalizedString::split has them.
#include <algorithm>

#include "core/error.h"
#include "data/detail/hf_pipeline.h"
#include "data/detail/regex.h"
#include "core/detail/utf8.h"

namespace tg::data::hf {
namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior behavior_of(const std::string& name) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  unsupported("pre_tokenizer Split behavior", name);
}

struct Span {
  size_t start, end;
  bool flag;  // a match, then (after the behaviour) whether to drop it
};

// Splits `p` at `matches` as NormalizedString::split(pattern, behavior) does; appends the
// non-empty pieces to `out`.
void split_piece(Piece&& p, const std::vector<Match>& matches, Behavior behavior, bool invert, Pieces& out) {
  std::vector<Span> spans;
  size_t prev = 0;
  if (p.text.empty()) spans.push_back({0, 0, false});
  for (const Match& m : matches) {
    if (m.start != prev) spans.push_back({prev, m.start, false});
    spans.push_back({m.start, m.end, true});
    prev = m.end;
  }
  if (prev != p.text.size()) spans.push_back({prev, p.text.size(), false});
  if (invert)
    for (Span& s : spans) s.flag = !s.flag;
  std::vector<Span> merged;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::Removed: merged = spans; break;
    case Behavior::Isolated:
      merged = spans;
      for (Span& s : merged) s.flag = false;
      break;
    case Behavior::Contiguous:
      for (const Span& s : spans) {
        if (s.flag == previous_match && !merged.empty()) merged.back().end = s.end;
        else merged.push_back({s.start, s.end, false});
        previous_match = s.flag;
      }
      break;
    case Behavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.flag && !previous_match && !merged.empty()) merged.back().end = s.end;
        else merged.push_back({s.start, s.end, false});
        previous_match = s.flag;
      }
      break;
    case Behavior::MergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !previous_match && !merged.empty()) merged.back().start = it->start;
        else merged.push_back({it->start, it->end, false});
        previous_match = it->flag;
      }
      std::reverse(merged.begin(), merged.end());
      break;
  }
  // Room for all of them at once: a whole document's words, not a move of every piece per doubling.
  if (out.capacity() < out.size() + merged.size()) out.reserve(std::max(2 * out.capacity(), out.size() + merged.size()));
  for (const Span& s : merged)
    if (!s.flag && s.end > s.start) out.push_back({p.text.substr(s.start, s.end - s.start), -1, p.at_start && s.start == 0});
}

// Applies `split` to every piece that is not an added token.
template <class F>
void for_each_split(Pieces& pieces, F&& split) {
  Pieces out;
  out.reserve(pieces.size());
  for (Piece& p : pieces) {
    if (p.added_id >= 0) out.push_back(std::move(p));
    else split(std::move(p), out);
  }
  pieces = std::move(out);
}

class Split : public PreTokenizer {
 public:
  Split(Regex regex, Behavior behavior, bool invert) : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(Pieces& pieces) const override {
    std::vector<Match> matches;
    for_each_split(pieces, [&](Piece&& p, Pieces& out) {
      matches.clear();
      regex_.find_all(p.text, matches);
      split_piece(std::move(p), matches, behavior_, invert_, out);
    });
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pre-tokenizer regex, as tokenizers' ByteLevel has it.
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The bytes stay bytes: the BPE model's vocabulary is mapped back from the byte alphabet.
class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), regex_(use_regex ? std::make_unique<Regex>(kGpt2Regex) : nullptr) {}
  void pre_tokenize(Pieces& pieces) const override {
    std::vector<Match> matches;
    for_each_split(pieces, [&](Piece&& p, Pieces& out) {
      if (add_prefix_space_ && !p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
      if (!regex_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        return;
      }
      matches.clear();
      regex_->find_all(p.text, matches);
      split_piece(std::move(p), matches, Behavior::Isolated, false, out);
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { Always, First, Never };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split), regex_(Regex::literal(replacement_)) {}
  void pre_tokenize(Pieces& pieces) const override {
    std::vector<Match> matches;
    for_each_split(pieces, [&](Piece&& p, Pieces& out) {
      std::string text;
      for (char c : p.text) c == ' ' ? void(text += replacement_) : void(text += c);
      const bool prepend = prepend_ == Prepend::Always || (prepend_ == Prepend::First && p.at_start);
      if (prepend && !text.empty() && text.compare(0, replacement_.size(), replacement_) != 0)
        text.insert(0, replacement_);
      p.text = std::move(text);
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        return;
      }
      matches.clear();
      regex_.find_all(p.text, matches);
      split_piece(std::move(p), matches, Behavior::MergedWithNext, false, out);
    });
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
  Regex regex_;
};

// Splits at Unicode white space, which it removes.
class WhitespaceSplit : public PreTokenizer {
 public:
  void pre_tokenize(Pieces& pieces) const override {
    for_each_split(pieces, [&](Piece&& p, Pieces& out) {
      size_t start = std::string::npos;
      for (size_t i = 0; i < p.text.size();) {
        const size_t at = i;
        const bool space = utf8::is_white_space(utf8::next(p.text, i));
        if (!space && start == std::string::npos) start = at;
        if (space && start != std::string::npos) {
          out.push_back({p.text.substr(start, at - start), -1, p.at_start && start == 0});
          start = std::string::npos;
        }
      }
      if (start != std::string::npos) out.push_back({p.text.substr(start), -1, p.at_start && start == 0});
    });
  }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(Pieces& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Regex pattern_of(const json::Value& pattern, const std::string& where) {
  if (const json::Value* s = pattern.find("String")) return Regex::literal(s->as_string(where));
  return Regex(field(pattern, "Regex", where + " pattern").as_string(where));
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json::Value& v) {
  if (v.is_null()) return nullptr;
  const std::string& type = type_of(v, "pre_tokenizer");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : field(v, "pretokenizers", "pre_tokenizer Sequence").as_array("pretokenizers"))
      if (auto pt = make_pre_tokenizer(p)) parts.push_back(std::move(pt));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "Split")
    return std::make_unique<Split>(pattern_of(field(v, "pattern", "pre_tokenizer Split"), "pre_tokenizer Split"),
                                   behavior_of(field(v, "behavior", "pre_tokenizer Split").as_string("behavior")),
                                   bool_field(v, "invert", false));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(bool_field(v, "add_prefix_space", true), bool_field(v, "use_regex", true));
  if (type == "Metaspace") {
    Metaspace::Prepend prepend = bool_field(v, "add_prefix_space", true) ? Metaspace::Prepend::Always
                                                                         : Metaspace::Prepend::Never;
    if (const json::Value* scheme = v.find("prepend_scheme")) {
      const std::string& s = scheme->as_string("prepend_scheme");
      if (s == "always") prepend = Metaspace::Prepend::Always;
      else if (s == "first") prepend = Metaspace::Prepend::First;
      else if (s == "never") prepend = Metaspace::Prepend::Never;
      else unsupported("pre_tokenizer Metaspace prepend_scheme", s);
    }
    return std::make_unique<Metaspace>(one_char_field(v, "replacement", "pre_tokenizer Metaspace"),
                                       prepend, bool_field(v, "split", true));
  }
  if (type == "Digits") {
    const bool individual = bool_field(v, "individual_digits", false);
    return std::make_unique<Split>(Regex(individual ? "\\p{N}" : "\\p{N}+"), Behavior::Isolated, false);
  }
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  unsupported("pre_tokenizer", type);
}

bool ends_in_byte_level(const json::Value& v) {
  if (v.is_null()) return false;
  const std::string& type = type_of(v, "pre_tokenizer");
  if (type == "ByteLevel") return true;
  if (type != "Sequence") return false;
  const auto& parts = field(v, "pretokenizers", "pre_tokenizer Sequence").as_array("pretokenizers");
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool byte_level = ends_in_byte_level(parts[i]);
    if (byte_level && i + 1 != parts.size())
      unsupported("pre_tokenizer", "ByteLevel followed by other pre-tokenizers (tapegrad needs it last)");
    if (byte_level) return true;
  }
  return false;
}

}  // namespace tg::data::hf
