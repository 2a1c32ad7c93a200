// Generated text for a terminal: a byte-level model can sample any byte.
#pragma once

#include <cstddef>
#include <string>

namespace examples {

// The text as one printable line: newlines as \n, other control bytes, backslashes and bytes that
// are not part of a UTF-8 character as \xNN. Not one_line: newlines, tabs and backslashes as they are.
std::string printable(const std::string& text, bool one_line = true);

// How much of `text` can be shown now while more is coming: all of it but an unfinished UTF-8
// character at its end (a byte-level model's next byte may complete it) or the U+FFFD at its end
// (how tokenizers decode the bytes of an unfinished character, one per byte token with byte
// fallback).
size_t finished_prefix(const std::string& text);

}  // namespace examples
