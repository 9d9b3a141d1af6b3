#include "kvasir/chat/error.h"

#include "kvasir/chat/limits.h"

namespace kvasir::chat {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Syntax:
      return "TemplateSyntaxError";
    case ErrorKind::Raised:
      return "TemplateError";
    case ErrorKind::Undefined:
      return "UndefinedError";
    case ErrorKind::Security:
      return "SecurityError";
    case ErrorKind::Type:
      return "TypeError";
    case ErrorKind::Value:
      return "ValueError";
    case ErrorKind::ZeroDivision:
      return "ZeroDivisionError";
    case ErrorKind::Overflow:
      return "OverflowError";
    case ErrorKind::Runtime:
      return "TemplateRuntimeError";
    case ErrorKind::FilterArgument:
      return "FilterArgumentError";
    case ErrorKind::Limit:
      return "LimitExceeded";
  }
  return "TemplateError";
}

namespace {

std::string describe(ErrorKind kind, const std::string& message, int line, int column) {
  std::string where;
  if (line > 0 && column > 0) {
    where = fmt::format(" at line {}, column {}", line, column);
  } else if (line > 0) {
    where = fmt::format(" at line {}", line);
  }
  switch (kind) {
    case ErrorKind::Syntax:
      return fmt::format("chat template syntax error{}: {}", where, message);
    case ErrorKind::Raised:
      return fmt::format("chat template raised an error{}: {}", where, message);
    case ErrorKind::Limit:
      return fmt::format("chat template exceeded a limit{}: {}", where, message);
    default:
      return fmt::format("chat template error{} ({}): {}", where, error_kind_name(kind), message);
  }
}

}  // namespace

TemplateError::TemplateError(ErrorKind kind, std::string message, int line, int column)
    : kvasir::Error(describe(kind, message, line, column)),
      kind_(kind),
      message_(std::move(message)),
      line_(line),
      column_(column) {}

void raise(ErrorKind kind, std::string message) {
  throw TemplateError(kind, std::move(message));
}

void check_limit(std::string_view what, uint64_t n, uint64_t limit) {
  if (n > limit) raise(ErrorKind::Limit, "{} {} exceeds the limit of {}", what, n, limit);
}

}  // namespace kvasir::chat
