// Template parser: tokens -> syntax tree, following Jinja2's grammar and operator precedence
// (condexpr < or < and < not < comparisons/in < +,- < ~ < *,/,//,% < ** < unary -,+ < filters
// and tests < postfix . [] ()). Unknown filters and tests are rejected here, as Jinja2 rejects
// them when compiling. Supported statements: if/elif/else, for (else, `if` filter, recursive),
// set (expression, block, namespace attribute), macro, call, filter, with, break/continue, print,
// raw, and Hugging Face's {% generation %}. Template loading (extends/include/import/block) has no
// meaning for a chat template and is a syntax error.
//
// Hostile input cannot exhaust the stack: nesting (blocks, brackets, unary operators) deeper than
// kMaxParseDepth is rejected while parsing, and so is any expression whose tree is higher than
// kMaxExprDepth. The second limit is what bounds chains: `x|f|f|...`, `1+1+...`, `a or a or ...`,
// `x.a.b...`, `f()()...` are parsed in loops, not by recursion, but build trees as deep as they
// are long, which every recursive walk (parser checks, the interpreter, destruction) would
// follow. Jinja2 itself cannot compile such chains past about 200 links either.
#pragma once

#include <string_view>

#include "kvasir/chat/ast.h"

namespace kvasir::chat {

inline constexpr int kMaxParseDepth = 200;
inline constexpr int kMaxExprDepth = 200;

// Throws TemplateError(Syntax) with line and column.
Body parse_template(std::string_view source);

}  // namespace kvasir::chat
