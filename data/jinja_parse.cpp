// Jinja2's parser for the subset of data/detail/jinja.h, over data/jinja_lex.cpp's tokens.
#include <algorithm>
#include <initializer_list>
#include <set>

#include "core/error.h"
#include "data/detail/jinja_ast.h"
#include "data/detail/jinja_budget.h"
#include "data/detail/jinja_lex.h"

namespace tg::data::jinja {
namespace {

using NodeP = std::unique_ptr<Node>;

class Parser {
 public:
  Parser(std::vector<Token> toks, GenerationBlocks& generation) : t_(std::move(toks)), generation_(generation) {}

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

  // kid under parent, whose height it may raise: no tree deeper than kMaxDepth reaches the
  // evaluator, nor the destructor, which recurse along it.
  void add(Node& parent, NodeP kid) {
    if (kid) parent.height = std::max(parent.height, kid->height + 1);
    if (parent.height > kMaxDepth) too_deep(parent.line);
    parent.kids.push_back(std::move(kid));
  }
  [[noreturn]] static void too_deep(int line) {
    syntax_error(line, "the template nests more than " + std::to_string(kMaxDepth) + " levels deep");
  }
  // One level of the parser's own recursion (an expression in parentheses, a block in a block).
  struct Descent {
    explicit Descent(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxDepth) too_deep(parser.cur().line);
    }
    ~Descent() { --parser.depth_; }
    Parser& parser;
  };

  // Statements up to a {% name %} of `ends` (whose name it consumes and reports in `end`).
  NodeP parse_body(const std::set<std::string>& ends, std::string& end) {
    const Descent level(*this);
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
        add(*body, std::move(text));
      } else if (tok.kind == Token::VarBegin) {
        take();
        NodeP print = node(Node::Type::Print, tok.line);
        add(*print, parse_tuple(true));
        if (cur().kind != Token::VarEnd) unexpected("'}}'");
        take();
        add(*body, std::move(print));
      } else if (tok.kind == Token::BlockBegin) {
        take();
        if (cur().kind != Token::Name) unexpected("a statement name");
        if (ends.count(cur().text)) {
          end = take().text;
          return body;
        }
        add(*body, parse_statement());
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
      if (loops_ == 0) syntax_error(line, "'" + kw + "' outside a loop");  // Python's SyntaxError in Jinja2, not an end of the output
      expect_block_end();
      return node(kw == "break" ? Node::Type::Break : Node::Type::Continue, line);
    }
    if (kw == "generation") {
      expect_block_end();
      NodeP gen = node(Node::Type::Generation, line);
      std::string end;
      add(*gen, parse_body({"endgeneration"}, end));
      expect_block_end();
      if (!gen->kids[0]->kids.empty()) generation_ = GenerationBlocks::Marking;
      else if (generation_ == GenerationBlocks::None) generation_ = GenerationBlocks::Empty;
      return gen;
    }
    static const std::set<std::string> known = {"macro", "call", "filter", "raw", "include", "import", "from", "extends",
                                                "block", "with", "do", "autoescape", "trans", "print"};
    if (known.count(kw)) syntax_error(line, "the {% " + kw + " %} statement is not supported by tapegrad's Jinja subset");
    if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else") syntax_error(line, "{% " + kw + " %} without its opening tag");
    syntax_error(line, "unknown statement {% " + kw + " %}");
  }

  // kids: a condition and its body for the if and each elif, then the else body (null if none).
  NodeP parse_if(int line) {
    NodeP n = node(Node::Type::If, line);
    std::string end = "elif";
    while (end == "elif") {  // a flat list: a long elif chain is no deep tree
      add(*n, parse_expression(false));
      expect_block_end();
      add(*n, parse_body({"elif", "else", "endif"}, end));
    }
    if (end == "else") {
      expect_block_end();
      add(*n, parse_body({"endif"}, end));
    } else {
      add(*n, nullptr);
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
    add(*n, parse_tuple(false));  // [0] the iterable
    NodeP cond;
    if (is_name("if")) {
      take();
      cond = parse_expression(true);
    }
    if (is_name("recursive")) syntax_error(cur().line, "recursive for loops are not supported");
    expect_block_end();
    std::string end;
    ++loops_;
    add(*n, parse_body({"else", "endfor"}, end));  // [1] the body
    --loops_;
    if (end == "else") {
      expect_block_end();
      add(*n, parse_body({"endfor"}, end));  // [2] the else body
    } else {
      add(*n, nullptr);
    }
    expect_block_end();
    add(*n, std::move(cond));  // [3] the filter
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
      add(*n, parse_tuple(true));
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
    add(*n, parse_tuple(true));
    expect_block_end();
    return n;
  }

  // An expression, or several separated by commas (a tuple).
  NodeP parse_tuple(bool with_condexpr) {
    const int line = cur().line;
    NodeP first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    NodeP tuple = node(Node::Type::TupleLit, line);
    add(*tuple, std::move(first));
    while (is_op(",")) {
      take();
      if (cur().kind == Token::BlockEnd || cur().kind == Token::VarEnd || is_op(")")) break;
      add(*tuple, parse_expression(with_condexpr));
    }
    return tuple;
  }

  NodeP parse_expression(bool with_condexpr) {
    const Descent level(*this);
    NodeP expr = parse_or();
    while (with_condexpr && is_name("if")) {
      const int line = take().line;
      NodeP cond = node(Node::Type::Cond, line);
      add(*cond, parse_or());  // [0] the test
      add(*cond, std::move(expr));  // [1] the value when true
      if (is_name("else")) {
        take();
        add(*cond, parse_expression(true));  // [2] when false
      } else {
        add(*cond, nullptr);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  NodeP binary(Node::Type type, std::string op, NodeP a, NodeP b, int line) {
    NodeP n = node(type, line);
    n->name = std::move(op);
    add(*n, std::move(a));
    add(*n, std::move(b));
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
      const Descent level(*this);
      NodeP n = node(Node::Type::Not, take().line);
      add(*n, parse_not());
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
  // a ~ b ~ c: one node of all the operands, as Jinja2's Concat, so a long chain is not a deep tree.
  NodeP parse_concat() {
    NodeP a = parse_math2();
    if (!is_op("~")) return a;
    NodeP n = node(Node::Type::Concat, cur().line);
    add(*n, std::move(a));
    while (is_op("~")) {
      take();
      add(*n, parse_math2());
    }
    return n;
  }
  NodeP parse_math2() {
    return left_chain(Token::Op, {"*", "/", "//", "%"}, Node::Type::Binary, [this] { return parse_pow(); });
  }
  NodeP parse_pow() { return left_chain(Token::Op, {"**"}, Node::Type::Binary, [this] { return parse_unary(true); }); }
  NodeP parse_unary(bool with_filter) {
    NodeP n;
    const Token& after = peek(2);
    if (is_op("-") && peek().kind == Token::Int && !(after.kind == Token::Op && (after.text == "." || after.text == "[" || after.text == "("))) {
      // -9223372036854775808 as one literal: int64's least value is no positive one negated.
      n = node(Node::Type::Literal, take().line);
      n->value = number_value(take(), true);
    } else if (is_op("-") || is_op("+")) {
      const Descent level(*this);
      const Node::Type type = is_op("-") ? Node::Type::Neg : Node::Type::Pos;
      n = node(type, take().line);
      add(*n, parse_unary(false));
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
      n->value = number_value(take(), false);
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
        add(*n, parse_expression(true));
        if (!is_op(",")) break;
        take();
      }
      expect_op("]");
      return n;
    }
    if (is_op("{")) {
      NodeP n = node(Node::Type::DictLit, take().line);  // kids: key, value, key, value ...
      while (!is_op("}")) {
        add(*n, parse_expression(true));
        expect_op(":");
        add(*n, parse_expression(true));
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
          add(*item, std::move(n));
          NodeP idx = node(Node::Type::Literal, line);
          idx->value = number_value(take(), false);
          add(*item, std::move(idx));
          n = std::move(item);
          continue;
        }
        NodeP attr = node(Node::Type::Attr, line);
        attr->name = expect_name();
        add(*attr, std::move(n));
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
        add(*sub, std::move(n));
        if (!colons && !parts[0]) syntax_error(line, "an empty subscript []");
        for (int k = 0; k < (colons ? 3 : 1); ++k) add(*sub, std::move(parts[k]));
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
    add(*call, std::move(n));
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
        if (!n.keywords.empty() && !n.keywords.back().empty())  // keywords only follow keywords: the last tells
          syntax_error(cur().line, "a positional argument after a keyword argument");
        n.keywords.push_back("");
      }
      add(n, parse_expression(true));
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
        while (is_op(".")) take(), f->name.append(".").append(expect_name());
        add(*f, std::move(n));
        if (is_op("(")) parse_args(*f);
        n = std::move(f);
      } else if (is_name("is")) {
        NodeP t = node(Node::Type::Test, take().line);
        if (is_name("not")) take(), t->negated = true;
        t->name = expect_name();
        while (is_op(".")) take(), t->name.append(".").append(expect_name());
        add(*t, std::move(n));
        const Token& c = cur();
        if (is_op("(")) {
          parse_args(*t);
        } else if ((c.kind == Token::Name || c.kind == Token::String || c.kind == Token::Int || c.kind == Token::Float ||
                    is_op("[") || is_op("{")) &&
                   !(c.kind == Token::Name && (c.text == "else" || c.text == "or" || c.text == "and"))) {
          // `x is divisibleby 3`: one argument without parentheses
          add(*t, parse_postfix(parse_primary()));
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
  int depth_ = 0;
  int loops_ = 0;  // for bodies around the current token
  GenerationBlocks& generation_;
};

}  // namespace

std::unique_ptr<Node> parse(std::string_view source, GenerationBlocks& generation) {
  return Parser(lex(source), generation).parse_template();
}

}  // namespace tg::data::jinja
