// The parsed form of a template (data/detail/jinja.h): one node type for statements and expressions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/detail/jinja.h"

namespace tg::data::jinja {

struct Node {
  enum class Type {
    // statements
    Body, Text, Print, If, For, Set, SetAttr, Break, Continue, Generation,
    // expressions
    Literal, Name, Attr, Item, Slice, Call, Filter, Test, Not, Neg, Pos, Binary, Concat, And, Or, Cond, ListLit, TupleLit,
    DictLit,
  };
  Type type;
  int line = 0;
  int height = 1;                     // levels of nodes from here down, this one included
  std::string name;                   // Text: the text; Name; Attr; Filter / Test; Binary: the operator; SetAttr: ns
  std::string attr;                   // SetAttr: the attribute
  bool negated = false;               // Test: `is not`
  Value value;                        // Literal
  std::vector<std::string> targets;   // For / Set: the names assigned
  std::vector<std::unique_ptr<Node>> kids;  // see parse: subject, arguments, bodies (null where absent)
  std::vector<std::string> keywords;  // Call / Filter / Test: a name per argument after kids[0] ("": positional)

  Node(Type t, int l) : type(t), line(l) {}
  const Node* kid(size_t i) const { return i < kids.size() ? kids[i].get() : nullptr; }
};

// Parses a template into its Body (tg::Error "chat template: line N: ..." on what it cannot), and
// what its {% generation %} blocks are.
std::unique_ptr<Node> parse(std::string_view source, GenerationBlocks& generation);

}  // namespace tg::data::jinja
