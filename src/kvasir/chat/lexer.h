// Template lexer: splits Jinja2 source into template data and the tokens inside {{ }} and {% %},
// applying whitespace control exactly as Jinja2's lexer does with trim_blocks=True and
// lstrip_blocks=True (the Hugging Face configuration): "{%-"/"-%}" strip all whitespace on that
// side, "{%+"/"+%}" disable lstrip/trim for that tag, a block tag or comment alone on its line
// takes the line's leading whitespace with it, and the first newline after a block tag or comment
// is removed. Newlines are normalised to "\n" and one trailing newline is dropped
// (keep_trailing_newline=False). Comments vanish and raw blocks become plain data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::chat {

enum class Tok { Data, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // Data/Name/String: the value (strings unescaped); Op: the operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1, column = 1;
};

// Throws TemplateError(Syntax) with line and column on malformed input.
std::vector<Token> tokenize(std::string_view source);

}  // namespace kvasir::chat
