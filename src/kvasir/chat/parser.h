// Template parser: tokens -> syntax tree, following Jinja2's grammar and operator precedence
// (condexpr < or < and < not < comparisons/in < +,- < ~ < *,/,//,% < ** < unary -,+ < filters
// and tests < postfix . [] ()). Unknown filters and tests are rejected here, as Jinja2 rejects
// them when compiling. Supported statements: if/elif/else, for (else, `if` filter, recursive),
// set (expression, block, namespace attribute), macro, call, filter, with, break/continue, print,
// raw, and Hugging Face's {% generation %}. Template loading (extends/include/import/block) has no
// meaning for a chat template and is a syntax error. Nesting deeper than kMaxParseDepth is
// rejected so hostile input cannot exhaust the stack.
#pragma once

#include <string_view>

#include "kvasir/chat/ast.h"

namespace kvasir::chat {

inline constexpr int kMaxParseDepth = 200;

// Throws TemplateError(Syntax) with line and column.
Body parse_template(std::string_view source);

}  // namespace kvasir::chat
