// tokenizer.json decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)
// and post-processors (TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel,
// Sequence), as tokenizers runs them.
#include <algorithm>

#include "core/error.h"
#include "data/detail/hf_pipeline.h"
#include "data/detail/regex.h"
#include "core/detail/utf8.h"

namespace tg::data::hf {
namespace {

// Characters back to bytes; a token with a character outside the alphabet keeps its own bytes.
class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool mapped = true;
      for (size_t i = 0; i < t.size() && mapped;) {
        const int b = byte_of_char(utf8::next(t, i));
        if (b < 0) mapped = false;
        else bytes += static_cast<char>(b);
      }
      if (!mapped) bytes.replace(mark, std::string::npos, t);
    }
    return {utf8::repair(bytes)};
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t at = 0; at < t.size();) {
        if (t.compare(at, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';  // the first token's replacements go: the prefix
          at += replacement_.size();
        } else {
          out += t[at++];
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const json::Value& pattern, std::string content) : content_(std::move(content)) {
    if (const json::Value* s = pattern.find("String")) regex_ = std::make_unique<Regex>(Regex::literal(s->as_string("String")));
    else regex_ = std::make_unique<Regex>(field(pattern, "Regex", "decoder Replace pattern").as_string("Regex"));
  }
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<Match> matches;
    for (std::string& t : tokens) {
      matches.clear();
      regex_->find_all(t, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t last = 0;
      for (const Match& m : matches) {
        out.append(t, last, m.start - last).append(content_);
        last = m.end;
      }
      t = out.append(t, last, std::string::npos);
    }
    return tokens;
  }

 private:
  std::string content_;
  std::unique_ptr<Regex> regex_;
};

// Runs of <0xNN> tokens become their bytes when those are UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (utf8::is_valid(pending)) out.push_back(pending);
      else
        for (size_t i = 0; i < pending_count; ++i) out.emplace_back("\xEF\xBF\xBD");
      pending.clear();
      pending_count = 0;
    };
    for (std::string& t : tokens) {
      const int byte = byte_token(t);
      if (byte >= 0) {
        pending += static_cast<char>(byte);
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }

 private:
  static int byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return {all};
  }
};

// Removes up to `left` / `right` copies of `content` from each token's ends.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t left, size_t right) : content_(std::move(content)), left_(left), right_(right) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    const size_t n = content_.size();
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t k = 0; k < left_ && end - begin >= n && t.compare(begin, n, content_) == 0; ++k) begin += n;
      for (size_t k = 0; k < right_ && end - begin >= n && t.compare(end - n, n, content_) == 0; ++k) end -= n;
      t = t.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  size_t left_, right_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// ---- post-processors

// The template for one sequence: special token ids around the sequence's ids.
class TemplateProcessor : public PostProcessor {
 public:
  TemplateProcessor(std::vector<int32_t> before, std::vector<int32_t> after) : before_(std::move(before)), after_(std::move(after)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    if (before_.empty() && after_.empty()) return ids;
    std::vector<int32_t> out = before_;
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after_.begin(), after_.end());
    return out;
  }
  std::vector<int32_t> added_ids() const override {
    std::vector<int32_t> ids = before_;
    ids.insert(ids.end(), after_.begin(), after_.end());
    return ids;
  }

 private:
  std::vector<int32_t> before_, after_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& p : parts_) ids = p->process(std::move(ids));
    return ids;
  }
  std::vector<int32_t> added_ids() const override {
    std::vector<int32_t> ids;
    for (const auto& p : parts_)
      for (int32_t id : p->added_ids()) ids.push_back(id);
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::unique_ptr<PostProcessor> template_processing(const json::Value& v) {
  const json::Value& specials = field(v, "special_tokens", "post_processor TemplateProcessing");
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const json::Value& item : field(v, "single", "post_processor TemplateProcessing").as_array("single")) {
    if (const json::Value* seq = item.find("Sequence")) {
      const std::string& id = field(*seq, "id", "TemplateProcessing Sequence").as_string("id");
      TG_CHECK(id == "A" && !seen_sequence, "tokenizer.json", "post_processor TemplateProcessing: the single template "
               "wants one sequence $A, got sequence '", id, "'");
      seen_sequence = true;
      continue;
    }
    const std::string& name = field(field(item, "SpecialToken", "TemplateProcessing piece"), "id", "TemplateProcessing SpecialToken").as_string("id");
    const json::Value* special = specials.find(name);
    TG_CHECK(special != nullptr, "tokenizer.json", "post_processor TemplateProcessing uses special token '", name,
             "', which its special_tokens do not define");
    for (const json::Value& id : field(*special, "ids", "TemplateProcessing special token").as_array("ids"))
      (seen_sequence ? after : before).push_back(token_id(id, "post_processor TemplateProcessing special token '" + name + "' id"));
  }
  TG_CHECK(seen_sequence, "tokenizer.json", "post_processor TemplateProcessing: the single template has no $A");
  return std::make_unique<TemplateProcessor>(std::move(before), std::move(after));
}

// RobertaProcessing / BertProcessing: cls $A sep, the tokens given as [content, id].
std::unique_ptr<PostProcessor> cls_sep(const json::Value& v, const std::string& where) {
  auto id_of = [&](const char* key) {
    const auto& pair = field(v, key, where).as_array(key);
    TG_CHECK(pair.size() == 2, "tokenizer.json", where, " ", key, " wants [token, id]");
    return token_id(pair[1], where + " " + key + " id");
  };
  return std::make_unique<TemplateProcessor>(std::vector<int32_t>{id_of("cls")}, std::vector<int32_t>{id_of("sep")});
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json::Value& v) {
  if (v.is_null()) return nullptr;
  const std::string& type = type_of(v, "decoder");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& p : field(v, "decoders", "decoder Sequence").as_array("decoders"))
      if (auto d = make_decoder(p)) parts.push_back(std::move(d));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    bool strip = bool_field(v, "add_prefix_space", true);
    if (const json::Value* scheme = v.find("prepend_scheme")) strip = scheme->as_string("prepend_scheme") != "never";
    return std::make_unique<MetaspaceDecoder>(one_char_field(v, "replacement", "decoder Metaspace"), strip);
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(field(v, "pattern", "decoder Replace"),
                                            field(v, "content", "decoder Replace").as_string("content"));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(one_char_field(v, "content", "decoder Strip"),
                                          count_value(field(v, "start", "decoder Strip"), "decoder Strip start"),
                                          count_value(field(v, "stop", "decoder Strip"), "decoder Strip stop"));
  unsupported("decoder", type);
}

std::unique_ptr<PostProcessor> make_post_processor(const json::Value& v) {
  if (v.is_null()) return nullptr;
  const std::string& type = type_of(v, "post_processor");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const auto& p : field(v, "processors", "post_processor Sequence").as_array("processors"))
      if (auto pp = make_post_processor(p)) parts.push_back(std::move(pp));
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  if (type == "ByteLevel") return std::make_unique<TemplateProcessor>(std::vector<int32_t>{}, std::vector<int32_t>{});  // offsets only
  if (type == "TemplateProcessing") return template_processing(v);
  if (type == "RobertaProcessing" || type == "BertProcessing") return cls_sep(v, "post_processor " + type);
  unsupported("post_processor", type);
}

}  // namespace tg::data::hf
