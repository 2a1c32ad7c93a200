// Jinja2's lexer (with trim_blocks and lstrip_blocks) and parser for the subset of data/detail/jinja.h.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <set>

#include "core/error.h"
#include "data/detail/jinja_ast.h"
#include "io/number.h"
#include "core/detail/utf8.h"

namespace tg::data::jinja {
namespace {

struct Token {
  enum Kind { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Kind kind;
  std::string text;
  int line;
};

[[noreturn]] void syntax_error(int line, const std::string& what) { fail("chat template", "line ", line, ": ", what); }

bool is_space_at(std::string_view s, size_t i, size_t* len) {
  size_t j = i;
  const char32_t cp = utf8::next(s, j);
  *len = j - i;
  return is_py_space(cp);
}

std::string rstrip(std::string_view s) {  // Python's str.rstrip()
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    size_t n;
    const bool space = is_space_at(s, i, &n);
    i += n;
    if (!space) end = i;
  }
  return std::string(s.substr(0, end));
}

size_t skip_space(std::string_view s, size_t i) {  // the regex \s*
  size_t n;
  while (i < s.size() && is_space_at(s, i, &n)) i += n;
  return i;
}

// Jinja reads the source as lines: \r\n, \r and Python's other line breaks become \n, and one
// trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view src) {
  std::string out;
  for (size_t i = 0; i < src.size();) {
    const size_t start = i;
    const char32_t cp = utf8::next(src, i);
    if (cp == '\r') {
      if (i < src.size() && src[i] == '\n') ++i;
      out += '\n';
    } else if (cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
      out += '\n';
    } else {
      out.append(src, start, i - start);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// A string literal's body as Python's "unicode-escape" codec reads it.
std::string unescape(std::string_view s, int line) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    auto hex = [&](size_t n) {
      char32_t cp = 0;
      for (size_t k = 1; k <= n; ++k) {
        const char h = i + k < s.size() ? s[i + k] : 'g';
        if (!std::isxdigit(static_cast<unsigned char>(h))) syntax_error(line, "truncated \\x / \\u escape in a string");
        cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      i += n;
      utf8::append(out, cp);
    };
    switch (c) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      case 'N': syntax_error(line, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = 0;
          size_t k = 0;
          for (; k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7'; ++k) cp = cp * 8 + static_cast<char32_t>(s[i + k] - '0');
          i += k - 1;
          utf8::append(out, cp);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

std::vector<Token> lex(const std::string& src) {
  std::vector<Token> toks;
  int line = 1;
  size_t pos = 0;
  bool line_starting = true;
  auto advance_to = [&](size_t p) {
    line += static_cast<int>(std::count(src.begin() + static_cast<long>(pos), src.begin() + static_cast<long>(p), '\n'));
    pos = p;
  };
  static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                               "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
  while (pos < src.size()) {
    size_t start = pos;
    for (;;) {
      start = src.find('{', start);
      if (start == std::string::npos || (start + 1 < src.size() && std::strchr("{%#", src[start + 1]))) break;
      ++start;
    }
    if (start == std::string::npos || start + 1 >= src.size()) {
      toks.push_back({Token::Data, src.substr(pos), line});
      break;
    }
    const char kind = src[start + 1];
    const char sign = start + 2 < src.size() && (src[start + 2] == '-' || src[start + 2] == '+') ? src[start + 2] : 0;
    std::string text = src.substr(pos, start - pos);
    if (sign == '-') {
      text = rstrip(text);
    } else if (sign != '+' && kind != '{') {  // lstrip_blocks: a block or comment alone on its line
      const size_t l = text.rfind('\n') + 1;  // npos + 1 == 0
      if ((l > 0 || line_starting) && std::all_of(text.begin() + static_cast<long>(l), text.end(),
                                                  [](char c) { return c == ' ' || c == '\t'; }))
        text.resize(l);
    }
    if (!text.empty()) toks.push_back({Token::Data, text, line});
    advance_to(start);
    size_t p = start + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      const size_t close = src.find("#}", p);
      if (close == std::string::npos) syntax_error(line, "a comment {# is never closed");
      size_t after = close + 2;
      if (close > p && src[close - 1] == '-') after = skip_space(src, after);
      else if (!(close > p && src[close - 1] == '+') && after < src.size() && src[after] == '\n') ++after;  // trim_blocks
      line_starting = src[after - 1] == '\n';
      advance_to(after);
      continue;
    }
    const bool block = kind == '%';
    toks.push_back({block ? Token::BlockBegin : Token::VarBegin, "", line});
    int depth = 0;
    for (;;) {
      p = skip_space(src, p);
      if (p >= src.size()) syntax_error(line, std::string("unexpected end of template, wanted ") + (block ? "%}" : "}}"));
      const char* close = block ? "%}" : "}}";
      auto at = [&](const char* s) { return src.compare(p, std::strlen(s), s) == 0; };
      if (depth == 0 && (at(block ? "-%}" : "-}}") || at(close) || (block && at("+%}")))) {
        size_t after;
        if (src[p] == '-') after = skip_space(src, p + 3);
        else if (src[p] == '+') after = p + 3;
        else after = p + 2 + (block && p + 2 < src.size() && src[p + 2] == '\n' ? 1 : 0);  // trim_blocks
        advance_to(p);
        toks.push_back({block ? Token::BlockEnd : Token::VarEnd, "", line});
        line_starting = src[after - 1] == '\n';
        advance_to(after);
        break;
      }
      advance_to(p);
      const char c = src[p];
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < src.size() && src[q] != c) q += src[q] == '\\' ? 2 : 1;
        if (q >= src.size()) syntax_error(line, "a string literal is never closed");
        toks.push_back({Token::String, unescape(std::string_view(src).substr(p + 1, q - p - 1), line), line});
        p = q + 1;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        bool is_float = false;
        while (q < src.size() && (std::isdigit(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
        if (q + 1 < src.size() && src[q] == '.' && std::isdigit(static_cast<unsigned char>(src[q + 1]))) {
          is_float = true;
          for (++q; q < src.size() && (std::isdigit(static_cast<unsigned char>(src[q])) || src[q] == '_');) ++q;
        }
        if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {
          size_t e = q + 1;
          if (e < src.size() && (src[e] == '+' || src[e] == '-')) ++e;
          if (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) {
            is_float = true;
            for (q = e; q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]));) ++q;
          }
        }
        std::string num;
        for (size_t k = p; k < q; ++k)
          if (src[k] != '_') num += src[k];
        toks.push_back({is_float ? Token::Float : Token::Int, num, line});
        p = q;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src.size() && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
        toks.push_back({Token::Name, src.substr(p, q - p), line});
        p = q;
      } else {
        const char* op = nullptr;
        for (const char* o : kOps)
          if (at(o)) {
            op = o;
            break;
          }
        if (!op) syntax_error(line, std::string("unexpected character '") + c + "'");
        if (std::strchr("([{", op[0])) ++depth;
        if (std::strchr(")]}", op[0])) --depth;
        toks.push_back({Token::Op, op, line});
        p += std::strlen(op);
      }
    }
  }
  toks.push_back({Token::Eof, "", line});
  return toks;
}

using NodeP = std::unique_ptr<Node>;

class Parser {
 public:
  Parser(std::vector<Token> toks, bool& has_generation) : t_(std::move(toks)), has_generation_(has_generation) {}

  NodeP parse_template() {
    std::string end;
    NodeP body = parse_body({}, end);
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().kind == Token::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Token::Name && cur().text == n; }
  Token take() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Token::Eof: return "the end of the template";
      case Token::BlockEnd: return "'%}'";
      case Token::VarEnd: return "'}}'";
      case Token::String: return "a string";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    syntax_error(cur().line, "unexpected " + describe(cur()) + ", wanted " + wanted);
  }
  void expect_op(const char* op) {
    if (!is_op(op)) unexpected(std::string("'") + op + "'");
    take();
  }
  std::string expect_name() {
    if (cur().kind != Token::Name) unexpected("a name");
    return take().text;
  }
  void expect_block_end() {
    if (cur().kind != Token::BlockEnd) unexpected("'%}'");
    take();
  }
  NodeP node(Node::Type type, int line) { return std::make_unique<Node>(type, line); }

  // Statements up to a {% name %} of `ends` (whose name it consumes and reports in `end`).
  NodeP parse_body(const std::set<std::string>& ends, std::string& end) {
    NodeP body = node(Node::Type::Body, cur().line);
    for (;;) {
      const Token& tok = cur();
      if (tok.kind == Token::Eof) {
        if (!ends.empty()) syntax_error(tok.line, "unexpected end of template, wanted {% " + *ends.rbegin() + " %}");
        return body;
      }
      if (tok.kind == Token::Data) {
        NodeP text = node(Node::Type::Text, tok.line);
        text->name = take().text;
        body->kids.push_back(std::move(text));
      } else if (tok.kind == Token::VarBegin) {
        take();
        NodeP print = node(Node::Type::Print, tok.line);
        print->kids.push_back(parse_tuple(true));
        if (cur().kind != Token::VarEnd) unexpected("'}}'");
        take();
        body->kids.push_back(std::move(print));
      } else if (tok.kind == Token::BlockBegin) {
        take();
        if (cur().kind != Token::Name) unexpected("a statement name");
        if (ends.count(cur().text)) {
          end = take().text;
          return body;
        }
        body->kids.push_back(parse_statement());
      } else {
        unexpected("text or a tag");
      }
    }
  }

  NodeP parse_statement() {
    const int line = cur().line;
    const std::string kw = take().text;
    if (kw == "if") return parse_if(line);
    if (kw == "for") return parse_for(line);
    if (kw == "set") return parse_set(line);
    if (kw == "break" || kw == "continue") {
      expect_block_end();
      return node(kw == "break" ? Node::Type::Break : Node::Type::Continue, line);
    }
    if (kw == "generation") {
      expect_block_end();
      has_generation_ = true;
      NodeP gen = node(Node::Type::Generation, line);
      std::string end;
      gen->kids.push_back(parse_body({"endgeneration"}, end));
      expect_block_end();
      return gen;
    }
    static const std::set<std::string> known = {"macro", "call", "filter", "raw", "include", "import", "from", "extends",
                                                "block", "with", "do", "autoescape", "trans", "print"};
    if (known.count(kw)) syntax_error(line, "the {% " + kw + " %} statement is not supported by tapegrad's Jinja subset");
    if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else") syntax_error(line, "{% " + kw + " %} without its opening tag");
    syntax_error(line, "unknown statement {% " + kw + " %}");
  }

  NodeP parse_if(int line) {
    NodeP n = node(Node::Type::If, line);
    n->kids.push_back(parse_expression(false));
    expect_block_end();
    std::string end;
    n->kids.push_back(parse_body({"elif", "else", "endif"}, end));
    if (end == "elif") {
      n->kids.push_back(parse_if(cur().line));
      return n;  // the nested if consumed the endif
    }
    if (end == "else") {
      expect_block_end();
      n->kids.push_back(parse_body({"endif"}, end));
    } else {
      n->kids.push_back(nullptr);
    }
    expect_block_end();
    return n;
  }

  NodeP parse_for(int line) {
    NodeP n = node(Node::Type::For, line);
    n->targets.push_back(expect_name());
    while (is_op(",")) {
      take();
      n->targets.push_back(expect_name());
    }
    if (!is_name("in")) unexpected("'in'");
    take();
    n->kids.push_back(parse_tuple(false));  // [0] the iterable
    NodeP cond;
    if (is_name("if")) {
      take();
      cond = parse_expression(true);
    }
    if (is_name("recursive")) syntax_error(cur().line, "recursive for loops are not supported");
    expect_block_end();
    std::string end;
    n->kids.push_back(parse_body({"else", "endfor"}, end));  // [1] the body
    if (end == "else") {
      expect_block_end();
      n->kids.push_back(parse_body({"endfor"}, end));  // [2] the else body
    } else {
      n->kids.push_back(nullptr);
    }
    expect_block_end();
    n->kids.push_back(std::move(cond));  // [3] the filter
    return n;
  }

  NodeP parse_set(int line) {
    const std::string first = expect_name();
    if (is_op(".")) {
      take();
      NodeP n = node(Node::Type::SetAttr, line);
      n->name = first;
      n->attr = expect_name();
      expect_op("=");
      n->kids.push_back(parse_tuple(true));
      expect_block_end();
      return n;
    }
    NodeP n = node(Node::Type::Set, line);
    n->targets.push_back(first);
    while (is_op(",")) {
      take();
      n->targets.push_back(expect_name());
    }
    if (!is_op("=")) syntax_error(line, "block assignments ({% set x %}...{% endset %}) are not supported");
    take();
    n->kids.push_back(parse_tuple(true));
    expect_block_end();
    return n;
  }

  // An expression, or several separated by commas (a tuple).
  NodeP parse_tuple(bool with_condexpr) {
    const int line = cur().line;
    NodeP first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    NodeP tuple = node(Node::Type::TupleLit, line);
    tuple->kids.push_back(std::move(first));
    while (is_op(",")) {
      take();
      if (cur().kind == Token::BlockEnd || cur().kind == Token::VarEnd || is_op(")")) break;
      tuple->kids.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  NodeP parse_expression(bool with_condexpr) {
    NodeP expr = parse_or();
    while (with_condexpr && is_name("if")) {
      const int line = take().line;
      NodeP cond = node(Node::Type::Cond, line);
      cond->kids.push_back(parse_or());  // [0] the test
      cond->kids.push_back(std::move(expr));  // [1] the value when true
      if (is_name("else")) {
        take();
        cond->kids.push_back(parse_expression(true));  // [2] when false
      } else {
        cond->kids.push_back(nullptr);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  NodeP binary(Node::Type type, std::string op, NodeP a, NodeP b, int line) {
    NodeP n = node(type, line);
    n->name = std::move(op);
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return n;
  }

  // operand (op operand)*, left-associative, for the operators `ops` (tokens of `kind`: Op, or Name
  // for and / or): `type` nodes named by their operator.
  template <class Operand>
  NodeP left_chain(Token::Kind kind, std::initializer_list<const char*> ops, Node::Type type, Operand operand) {
    NodeP a = operand();
    auto at_op = [&] { return std::any_of(ops.begin(), ops.end(), [&](const char* op) { return cur().text == op; }); };
    while (cur().kind == kind && at_op()) {
      const Token op = take();
      a = binary(type, op.text, std::move(a), operand(), op.line);
    }
    return a;
  }

  NodeP parse_or() { return left_chain(Token::Name, {"or"}, Node::Type::Or, [this] { return parse_and(); }); }
  NodeP parse_and() { return left_chain(Token::Name, {"and"}, Node::Type::And, [this] { return parse_not(); }); }
  NodeP parse_not() {
    if (is_name("not")) {
      NodeP n = node(Node::Type::Not, take().line);
      n->kids.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }
  NodeP parse_compare() {
    NodeP a = parse_math1();
    bool compared = false;
    for (;;) {
      std::string op;
      if (cur().kind == Token::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
                                      cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        take();
      } else if (is_name("in")) {
        op = "in";
        take();
      } else if (is_name("not") && peek().kind == Token::Name && peek().text == "in") {
        op = "not in";
        take(), take();
      } else {
        return a;
      }
      if (compared) syntax_error(cur().line, "chained comparisons (a < b < c) are not supported");
      compared = true;
      a = binary(Node::Type::Binary, op, std::move(a), parse_math1(), cur().line);
    }
  }
  NodeP parse_math1() {
    return left_chain(Token::Op, {"+", "-"}, Node::Type::Binary, [this] { return parse_concat(); });
  }
  NodeP parse_concat() { return left_chain(Token::Op, {"~"}, Node::Type::Binary, [this] { return parse_math2(); }); }
  NodeP parse_math2() {
    return left_chain(Token::Op, {"*", "/", "//", "%"}, Node::Type::Binary, [this] { return parse_pow(); });
  }
  NodeP parse_pow() { return left_chain(Token::Op, {"**"}, Node::Type::Binary, [this] { return parse_unary(true); }); }
  NodeP parse_unary(bool with_filter) {
    NodeP n;
    if (is_op("-") || is_op("+")) {
      const Node::Type type = is_op("-") ? Node::Type::Neg : Node::Type::Pos;
      n = node(type, take().line);
      n->kids.push_back(parse_unary(false));
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    return with_filter ? parse_filters(std::move(n)) : std::move(n);
  }

  NodeP parse_primary() {
    const Token& tok = cur();
    if (tok.kind == Token::Name) {
      NodeP n = node(Node::Type::Literal, tok.line);
      const std::string& s = tok.text;
      if (s == "true" || s == "True") n->value = Value(true);
      else if (s == "false" || s == "False") n->value = Value(false);
      else if (s == "none" || s == "None") n->value = Value::none();
      else n->type = Node::Type::Name, n->name = s;
      take();
      return n;
    }
    if (tok.kind == Token::String) {
      NodeP n = node(Node::Type::Literal, tok.line);
      std::string s;
      while (cur().kind == Token::String) s += take().text;  // adjacent literals join, as in Python
      n->value = Value(std::move(s));
      return n;
    }
    if (tok.kind == Token::Int || tok.kind == Token::Float) {
      NodeP n = node(Node::Type::Literal, tok.line);
      const std::optional<int64_t> i = io::parse_integer<int64_t>(tok.text);
      const std::optional<double> d = io::parse_number(tok.text);
      if (tok.kind == Token::Int ? !i : !d) syntax_error(tok.line, "the number " + tok.text + " is out of range");
      n->value = tok.kind == Token::Int ? Value(*i) : Value(*d);
      take();
      return n;
    }
    if (is_op("(")) {
      const int line = take().line;
      if (is_op(")")) {
        take();
        return node(Node::Type::TupleLit, line);
      }
      NodeP inner = parse_tuple(true);
      if (inner->type != Node::Type::TupleLit && is_op(",")) unexpected("')'");
      expect_op(")");
      return inner;
    }
    if (is_op("[")) {
      NodeP n = node(Node::Type::ListLit, take().line);
      while (!is_op("]")) {
        n->kids.push_back(parse_expression(true));
        if (!is_op(",")) break;
        take();
      }
      expect_op("]");
      return n;
    }
    if (is_op("{")) {
      NodeP n = node(Node::Type::DictLit, take().line);  // kids: key, value, key, value ...
      while (!is_op("}")) {
        n->kids.push_back(parse_expression(true));
        expect_op(":");
        n->kids.push_back(parse_expression(true));
        if (!is_op(",")) break;
        take();
      }
      expect_op("}");
      return n;
    }
    unexpected("an expression");
  }

  NodeP parse_postfix(NodeP n) {
    for (;;) {
      if (is_op(".")) {
        const int line = take().line;
        if (cur().kind == Token::Int) {
          NodeP item = node(Node::Type::Item, line);
          item->kids.push_back(std::move(n));
          NodeP idx = node(Node::Type::Literal, line);
          const std::optional<int64_t> i = io::parse_integer<int64_t>(cur().text);
          if (!i) syntax_error(line, "the index ." + cur().text + " is out of range");
          idx->value = Value(*i);
          take();
          item->kids.push_back(std::move(idx));
          n = std::move(item);
          continue;
        }
        NodeP attr = node(Node::Type::Attr, line);
        attr->name = expect_name();
        attr->kids.push_back(std::move(n));
        n = std::move(attr);
      } else if (is_op("[")) {
        const int line = take().line;
        NodeP parts[3];
        int colons = 0;
        for (;;) {
          if (is_op(":")) {
            if (++colons > 2) unexpected("']'");
            take();
          } else if (is_op("]")) {
            break;
          } else {
            if (parts[colons]) unexpected("':' or ']'");
            parts[colons] = parse_expression(true);
            if (colons == 0 && is_op(",")) syntax_error(line, "tuple subscripts (x[a, b]) are not supported");
          }
        }
        take();
        NodeP sub = node(colons ? Node::Type::Slice : Node::Type::Item, line);
        sub->kids.push_back(std::move(n));
        if (!colons && !parts[0]) syntax_error(line, "an empty subscript []");
        for (int k = 0; k < (colons ? 3 : 1); ++k) sub->kids.push_back(std::move(parts[k]));
        n = std::move(sub);
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  // n(args): the call node.
  NodeP parse_call(NodeP n) {
    NodeP call = node(Node::Type::Call, cur().line);
    call->kids.push_back(std::move(n));
    parse_args(*call);
    return call;
  }

  // '(' args ')' into n.kids / n.keywords.
  void parse_args(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) syntax_error(cur().line, "*args and **kwargs in calls are not supported");
      if (cur().kind == Token::Name && peek().kind == Token::Op && peek().text == "=") {
        n.keywords.push_back(take().text);
        take();
      } else {
        if (std::any_of(n.keywords.begin(), n.keywords.end(), [](const std::string& k) { return !k.empty(); }))
          syntax_error(cur().line, "a positional argument after a keyword argument");
        n.keywords.push_back("");
      }
      n.kids.push_back(parse_expression(true));
      if (!is_op(",")) break;
      take();
    }
    expect_op(")");
  }

  NodeP parse_filters(NodeP n) {
    for (;;) {
      if (is_op("|")) {
        NodeP f = node(Node::Type::Filter, take().line);
        f->name = expect_name();
        while (is_op(".")) take(), f->name += "." + expect_name();
        f->kids.push_back(std::move(n));
        if (is_op("(")) parse_args(*f);
        n = std::move(f);
      } else if (is_name("is")) {
        NodeP t = node(Node::Type::Test, take().line);
        if (is_name("not")) take(), t->negated = true;
        t->name = expect_name();
        while (is_op(".")) take(), t->name += "." + expect_name();
        t->kids.push_back(std::move(n));
        const Token& c = cur();
        if (is_op("(")) {
          parse_args(*t);
        } else if ((c.kind == Token::Name || c.kind == Token::String || c.kind == Token::Int || c.kind == Token::Float ||
                    is_op("[") || is_op("{")) &&
                   !(c.kind == Token::Name && (c.text == "else" || c.text == "or" || c.text == "and"))) {
          // `x is divisibleby 3`: one argument without parentheses
          t->kids.push_back(parse_postfix(parse_primary()));
          t->keywords.push_back("");
        }
        n = std::move(t);
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  bool& has_generation_;
};

}  // namespace

std::unique_ptr<Node> parse(std::string_view source, bool& has_generation) {
  TG_CHECK(utf8::is_valid(source), "chat template", "the template is not valid UTF-8");
  return Parser(lex(normalize_newlines(source)), has_generation).parse_template();
}

}  // namespace tg::data::jinja
