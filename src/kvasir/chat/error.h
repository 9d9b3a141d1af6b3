// Errors raised by the chat template engine. A TemplateError is a kvasir::Error that also says
// which kind of failure it was — named after the Python exception Jinja2 would raise for the same
// template and input, so tests can compare against Jinja2 — the Jinja2-compatible message text,
// and where in the template it happened (1-based line/column; 0 when unknown).
#pragma once

#include <fmt/format.h>

#include <string>

#include "kvasir/util/error.h"

namespace kvasir::chat {

enum class ErrorKind {
  Syntax,          // TemplateSyntaxError / TemplateAssertionError (parse time)
  Raised,          // TemplateError from the template's own raise_exception(msg)
  Undefined,       // UndefinedError: an operation on an undefined value
  Security,        // SecurityError: e.g. calling list.append in the immutable sandbox
  Type,            // TypeError
  Value,           // ValueError
  ZeroDivision,    // ZeroDivisionError
  Overflow,        // OverflowError (e.g. range() larger than the sandbox allows)
  Runtime,         // TemplateRuntimeError and other runtime failures
  FilterArgument,  // FilterArgumentError
  Limit,           // Kvasir's own resource limits (depth, output size, work budget)
};

// The Python exception name Jinja2 raises for this kind ("TypeError", "UndefinedError", ...).
const char* error_kind_name(ErrorKind kind);

class TemplateError : public kvasir::Error {
 public:
  TemplateError(ErrorKind kind, std::string message, int line = 0, int column = 0);

  ErrorKind kind() const noexcept { return kind_; }
  // The message alone, worded as Jinja2 words it (for raise_exception: the template's text).
  const std::string& message() const noexcept { return message_; }
  int line() const noexcept { return line_; }
  int column() const noexcept { return column_; }
  // The same error located at (line, column).
  TemplateError located(int line, int column) const {
    return TemplateError(kind_, message_, line, column);
  }

 private:
  ErrorKind kind_;
  std::string message_;
  int line_, column_;
};

[[noreturn]] void raise(ErrorKind kind, std::string message);

template <class... Args>
[[noreturn]] void raise(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  raise(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvasir::chat
