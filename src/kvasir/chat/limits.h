// The template engine's resource limits in one place. A chat template is untrusted input (it
// comes from a downloaded GGUF file or a --chat-template file), so every way a template can make
// the engine do more work or build more data than the template itself is long is bounded:
//
//  - parse time (parser.h): statement/bracket nesting (kMaxParseDepth) and the depth of one
//    expression's tree (kMaxExprDepth; long operator, filter, call and subscript chains are
//    built in loops, not recursion, so they need a limit of their own);
//  - render time (RenderOptions in chat_template.h, defaults below): the size of the output and
//    of any string built on the way (max_output_bytes), a work budget in steps (max_steps), and
//    the depth of nested evaluations (max_depth).
//
// Amplifying operations — format widths and precisions, string and list repetition, padding
// widths (center, ljust, rjust, zfill, expandtabs, indent), batch fill, replace — check the size
// they are about to produce against max_output_bytes (strings) or max_steps (sequence items:
// building each item costs a step) BEFORE they allocate, and fail with a Limit error that names
// what was too big: "format width 2147483647 exceeds the limit of 16777216".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvasir::chat {

// RenderOptions' defaults.
inline constexpr size_t kDefaultMaxOutputBytes = size_t{16} << 20;
inline constexpr size_t kDefaultMaxSteps = 5'000'000;  // ~1 s of CPU
inline constexpr int kDefaultMaxDepth = 600;

// Raises TemplateError(Limit, "<what> <n> exceeds the limit of <limit>") when n > limit.
void check_limit(std::string_view what, uint64_t n, uint64_t limit);

// n * m, saturating at UINT64_MAX (sizes of repetitions, for check_limit).
inline uint64_t saturating_mul(uint64_t n, uint64_t m) {
  uint64_t r;
  return __builtin_mul_overflow(n, m, &r) ? UINT64_MAX : r;
}

}  // namespace kvasir::chat
