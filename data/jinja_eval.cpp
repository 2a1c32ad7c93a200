// Renders a parsed template (data/detail/jinja_ast.h) with Jinja2's scoping: a for loop's body gets a
// fresh scope each iteration (a set inside it is gone after the iteration), an if does not.
#include <cmath>

#include "core/error.h"
#include "data/detail/jinja_ast.h"
#include "data/detail/jinja_budget.h"
#include "data/detail/jinja_builtins.h"

namespace tg::data::jinja {
namespace {

struct Scope {
  Dict vars;
  const Scope* parent = nullptr;

  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      Budget::steps(static_cast<int64_t>(s->vars.size() / 16));  // a template that sets 10^5 names looks through them
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    Budget::steps(static_cast<int64_t>(vars.size() / 16));
    for (auto& [k, old] : vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { Normal, Break, Continue };

bool contains(const Value& container, const Value& x) {
  Args args;
  args.positional.push_back(container);
  if (container.is_string() && !x.is_string()) eval_fail("'in <string>' wants a string on the left, got ", describe(x));
  if (container.is_undefined() || container.is_none() || container.is_number())
    eval_fail("'in' on ", describe(container));
  return test("in", x, args);
}

class Renderer {
 public:
  Renderer(std::string& out, std::vector<std::pair<size_t, size_t>>* generation) : out_(out), generation_(generation) {}

  Flow exec(const Node& n, Scope& scope) {
    try {
      const Nested level;
      Budget::steps(1);
      return exec_inner(n, scope);
    } catch (const EvalError& e) {
      fail("chat template", "line ", n.line, ": ", e.message);
    }
  }

 private:
  Flow exec_body(const Node* body, Scope& scope) {
    if (!body) return Flow::Normal;
    for (const auto& k : body->kids) {
      const Flow f = k->type == Node::Type::Text ? (Budget::append(out_, k->name), Flow::Normal) : exec(*k, scope);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_inner(const Node& n, Scope& scope) {
    switch (n.type) {
      case Node::Type::Body: return exec_body(&n, scope);
      case Node::Type::Text: Budget::append(out_, n.name); return Flow::Normal;
      case Node::Type::Print: Budget::append(out_, eval(*n.kids[0], scope).str()); return Flow::Normal;
      case Node::Type::If: {
        size_t i = 0;
        while (i + 1 < n.kids.size() && !eval(*n.kids[i], scope).truthy()) i += 2;  // the if, then each elif
        return exec_body(n.kid(i + 1 < n.kids.size() ? i + 1 : i), scope);
      }
      case Node::Type::For: return exec_for(n, scope);
      case Node::Type::Set: {
        Value v = eval(*n.kids[0], scope);
        if (n.targets.size() == 1) {
          scope.set(n.targets[0], std::move(v));
        } else {
          const List items = unpack(v, n.targets.size());
          for (size_t i = 0; i < items.size(); ++i) scope.set(n.targets[i], items[i]);
        }
        return Flow::Normal;
      }
      case Node::Type::SetAttr: {
        const Value* ns = scope.lookup(n.name);
        if (!ns || ns->kind() != Value::Kind::Namespace)
          eval_fail("cannot assign attribute on ", ns ? describe(*ns) : "'" + n.name + "' (undefined)",
                    ": only a namespace() can be changed");
        Value v = eval(*n.kids[0], scope);
        for (auto& [k, old] : ns->namespace_items())
          if (k == n.attr) {
            old = std::move(v);
            return Flow::Normal;
          }
        ns->namespace_items().emplace_back(n.attr, std::move(v));
        return Flow::Normal;
      }
      case Node::Type::Break: return Flow::Break;
      case Node::Type::Continue: return Flow::Continue;
      case Node::Type::Generation: {
        const size_t begin = out_.size();
        const Flow f = exec_body(n.kid(0), scope);
        if (generation_) generation_->emplace_back(begin, out_.size());
        return f;
      }
      default: eval_fail("an expression where a statement belongs");
    }
  }

  static List unpack(const Value& v, size_t n) {
    if (v.kind() != Value::Kind::List) eval_fail("cannot unpack ", describe(v), " into ", n, " names");
    if (v.as_list().size() != n) eval_fail("cannot unpack ", v.as_list().size(), " values into ", n, " names");
    return v.as_list();
  }

  Flow exec_for(const Node& n, Scope& scope) {
    List items = iterate(eval(*n.kids[0], scope));
    auto bind = [&](Scope& s, const Value& v) {
      if (n.targets.size() == 1) {
        s.set(n.targets[0], v);
      } else {
        const List parts = unpack(v, n.targets.size());
        for (size_t i = 0; i < parts.size(); ++i) s.set(n.targets[i], parts[i]);
      }
    };
    if (const Node* cond = n.kid(3)) {  // the filter runs first: loop.* counts what it keeps
      List kept;
      for (const Value& v : items) {
        Scope s{{}, &scope};
        bind(s, v);
        if (eval(*cond, s).truthy()) kept.push_back(v);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(n.kid(2), scope);  // the else is outside the loop
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      Budget::steps(1);
      Scope s{{}, &scope};
      const size_t u = static_cast<size_t>(i);
      Dict loop = {{"index", Value(i + 1)},
                   {"index0", Value(i)},
                   {"revindex", Value(len - i)},
                   {"revindex0", Value(len - i - 1)},
                   {"first", Value(i == 0)},
                   {"last", Value(i == len - 1)},
                   {"length", Value(len)},
                   {"depth", Value(1)},
                   {"depth0", Value(0)},
                   {"previtem", i > 0 ? items[u - 1] : Value::undefined("loop.previtem")},
                   {"nextitem", i + 1 < len ? items[u + 1] : Value::undefined("loop.nextitem")},
                   {"cycle", Value::function("loop.cycle", [i](const Value&, Args& a) {
                      if (a.positional.empty()) eval_fail("loop.cycle wants at least one value");
                      return a.positional[static_cast<size_t>(i) % a.positional.size()];
                    })}};
      s.set("loop", Value::dict(std::move(loop)));
      bind(s, items[u]);
      if (exec_body(n.kid(1), s) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value call_args(const Node& n, size_t first, Scope& scope, Args& args) {
    for (size_t i = first; i < n.kids.size(); ++i) {
      Value v = eval(*n.kids[i], scope);
      const std::string& kw = n.keywords[i - first];
      if (kw.empty()) args.positional.push_back(std::move(v));
      else args.keyword.emplace_back(kw, std::move(v));
    }
    return Value();
  }

  Value eval(const Node& n, Scope& scope) {
    const Nested level;
    Budget::steps(1);
    switch (n.type) {
      case Node::Type::Literal: return n.value;
      case Node::Type::Name: {
        const Value* v = scope.lookup(n.name);
        return v ? *v : Value::undefined(n.name);
      }
      case Node::Type::Attr: return attribute(eval(*n.kids[0], scope), n.name);
      case Node::Type::Item: return item(eval(*n.kids[0], scope), eval(*n.kids[1], scope));
      case Node::Type::Slice: {
        auto part = [&](size_t i) { return n.kid(i) ? eval(*n.kid(i), scope) : Value::none(); };
        return slice(eval(*n.kids[0], scope), part(1), part(2), part(3));
      }
      case Node::Type::Call: {
        const Value fn = eval(*n.kids[0], scope);
        if (fn.kind() != Value::Kind::Function) eval_fail(describe(fn), " is not callable");
        Args args;
        call_args(n, 1, scope, args);
        return fn.call(args);
      }
      case Node::Type::Filter: {
        const Value x = eval(*n.kids[0], scope);
        Args args;
        call_args(n, 1, scope, args);
        return filter(n.name, x, args);
      }
      case Node::Type::Test: {
        const Value x = eval(*n.kids[0], scope);
        Args args;
        call_args(n, 1, scope, args);
        return Value(test(n.name, x, args) != n.negated);
      }
      case Node::Type::Not: return Value(!eval(*n.kids[0], scope).truthy());
      case Node::Type::Neg: return negate(eval(*n.kids[0], scope));
      case Node::Type::Pos: {
        const Value x = eval(*n.kids[0], scope);
        if (!x.is_number()) eval_fail("unary + on ", describe(x));
        return x.kind() == Value::Kind::Float ? x : Value(x.as_int());
      }
      case Node::Type::And: {
        Value a = eval(*n.kids[0], scope);
        return a.truthy() ? eval(*n.kids[1], scope) : a;
      }
      case Node::Type::Or: {
        Value a = eval(*n.kids[0], scope);
        return a.truthy() ? a : eval(*n.kids[1], scope);
      }
      case Node::Type::Cond:
        return eval(*n.kids[0], scope).truthy() ? eval(*n.kids[1], scope)
               : n.kid(2)                       ? eval(*n.kid(2), scope)
                                                : Value::undefined("the else of a conditional expression");
      case Node::Type::ListLit:
      case Node::Type::TupleLit: {
        Budget::items(static_cast<int64_t>(n.kids.size()));
        List items;
        for (const auto& k : n.kids) items.push_back(eval(*k, scope));
        return Value::list(std::move(items), n.type == Node::Type::TupleLit);
      }
      case Node::Type::DictLit: {
        Dict items;
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
          const Value k = eval(*n.kids[i], scope);
          if (!k.is_string()) eval_fail("dict literals with keys other than strings are not supported");
          Value v = eval(*n.kids[i + 1], scope);
          Budget::steps(static_cast<int64_t>(items.size()));  // a literal of n keys looks through n^2 / 2
          bool replaced = false;
          for (auto& [key, old] : items)
            if (key == k.as_string()) old = v, replaced = true;
          if (!replaced) items.emplace_back(k.as_string(), std::move(v));
        }
        return Value::dict(std::move(items));
      }
      case Node::Type::Binary: return binary(n, scope);
      case Node::Type::Concat: {
        std::string out;
        for (const auto& k : n.kids) Budget::append(out, eval(*k, scope).str());
        return Value(std::move(out));
      }
      default: eval_fail("a statement where an expression belongs");
    }
  }

  Value binary(const Node& n, Scope& scope) {
    const Value a = eval(*n.kids[0], scope), b = eval(*n.kids[1], scope);
    const std::string& op = n.name;
    if (op == "==") return Value(a == b);
    if (op == "!=") return Value(!(a == b));
    if (op == "<") return Value(compare(a, b) < 0);
    if (op == ">") return Value(compare(a, b) > 0);
    if (op == "<=") return Value(compare(a, b) <= 0);
    if (op == ">=") return Value(compare(a, b) >= 0);
    if (op == "in") return Value(contains(b, a));
    if (op == "not in") return Value(!contains(b, a));
    if (op == "%" && a.is_string()) eval_fail("'%' string formatting is not supported");
    return arithmetic(op, a, b);
  }

  std::string& out_;
  std::vector<std::pair<size_t, size_t>>* generation_;
};

// Jinja2's sandbox (MAX_RANGE), which transformers renders chat templates in.
constexpr uint64_t kMaxRange = 100000;

Value make_namespace(const Value&, Args& a) {
  Dict items;
  if (a.positional.size() > 1) eval_fail("namespace() takes at most one positional argument (a dict)");
  if (!a.positional.empty()) {
    if (a.positional[0].kind() != Value::Kind::Dict) eval_fail("namespace() wants a dict, got ", describe(a.positional[0]));
    items = a.positional[0].as_dict();
  }
  for (auto& kv : a.keyword) items.push_back(kv);
  Budget::items(static_cast<int64_t>(items.size()) + 1);
  Value ns = Value::namespace_(std::move(items));
  Budget::adopt(ns);
  return ns;
}

Value make_range(const Value&, Args& a) {
  if (a.positional.empty() || a.positional.size() > 3 || !a.keyword.empty()) eval_fail("range wants 1 to 3 integers");
  for (const Value& v : a.positional)
    if (!is_int(v)) eval_fail("range wants integers, got ", describe(v));
  const int64_t start = a.positional.size() > 1 ? a.positional[0].as_int() : 0;
  const int64_t stop = a.positional.size() > 1 ? a.positional[1].as_int() : a.positional[0].as_int();
  const int64_t step = a.positional.size() > 2 ? a.positional[2].as_int() : 1;
  if (step == 0) eval_fail("range() step must not be zero");
  // Python's len(range(...)) in unsigned arithmetic, which cannot overflow at int64's edges.
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  const uint64_t n = step > 0 ? (start < stop ? (u(stop) - u(start) - 1) / u(step) + 1 : 0)
                              : (start > stop ? (u(start) - u(stop) - 1) / (0 - u(step)) + 1 : 0);
  if (n > kMaxRange) eval_fail("range() of ", n, " items: ranges larger than ", kMaxRange, " are blocked, as in transformers' sandbox");
  Budget::items(static_cast<int64_t>(n));
  List out;
  out.reserve(n);
  for (uint64_t k = 0; k < n; ++k) out.push_back(Value(static_cast<int64_t>(u(start) + k * u(step))));  // wraps to the in-range value
  return Value::list(std::move(out));
}

Value make_dict(const Value&, Args& a) {
  if (!a.positional.empty()) eval_fail("dict() with positional arguments is not supported");
  Budget::items(static_cast<int64_t>(a.keyword.size()));
  return Value::dict(a.keyword);
}

}  // namespace

// In the body: generation_'s initializer would run after root_'s and clear what parse set.
Template::Template(std::string_view source) { root_ = parse(source, generation_); }
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Dict& variables, const ChatTemplateLimits& limits,
                             std::vector<std::pair<size_t, size_t>>* generation) const {
  const Budget budget(limits);  // this thread's render until it returns, then it empties the namespaces made
  // Jinja's globals, under the caller's variables.
  Scope globals{{{"namespace", Value::function("namespace", make_namespace)},
                 {"range", Value::function("range", make_range)},
                 {"dict", Value::function("dict", make_dict)}},
                nullptr};
  Scope top{variables, &globals};
  std::string out;
  Renderer(out, generation).exec(*root_, top);
  return out;
}

const std::string& Value::undefined_name() const {
  static const std::string empty;
  return kind_ == Kind::Undefined && str_ ? *str_ : empty;
}

}  // namespace tg::data::jinja
