// Jinja2's lexer (data/jinja_lex.cpp) for the parser of data/jinja_parse.cpp. Internal to data/jinja*.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tg::data::jinja {

struct Token {
  enum Kind { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Kind kind;
  std::string text;  // Data: the text; String: its value; Int / Float: the literal as written
  int line;
};

// tg::Error "chat template: line N: what".
[[noreturn]] void syntax_error(int line, const std::string& what);

// The tokens of a template (valid UTF-8, its line breaks read as Jinja reads them), Eof last.
std::vector<Token> lex(std::string_view source);

}  // namespace tg::data::jinja
