// Jinja2's lexer (data/jinja_lex.cpp) for the parser of data/jinja_parse.cpp. Internal to data/jinja*.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "data/detail/jinja.h"

namespace tg::data::jinja {

struct Token {
  enum Kind { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Kind kind;
  std::string text;  // Data: the text; String: its value; Int / Float: the literal as written
  int line;
};

// tg::Error "chat template: line N: what".
[[noreturn]] void syntax_error(int line, const std::string& what);

// An Int or Float token's value as Jinja2's: Python's int (base from a 0b / 0o / 0x prefix) or
// float; negative for one after a unary minus, where int64's least value fits. A syntax error
// naming the line for an int past int64.
Value number_value(const Token& t, bool negative);

// The tokens of a template (valid UTF-8, its line breaks read as Jinja reads them), Eof last.
std::vector<Token> lex(std::string_view source);

}  // namespace tg::data::jinja
