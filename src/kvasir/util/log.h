// Logging: one process-wide logger with levels and timestamps, writing text or JSON lines to
// stderr (spdlog underneath: thread-safe, one write per line).
//
// Text:  2026-12-01T22:30:01.123Z INFO  [req-7f3a] POST /v1/completions 200 status=200 ttft_ms=31
// JSON:  {"ts":"2026-12-01T22:30:01.123Z","level":"info","request_id":"req-7f3a",
//         "msg":"POST /v1/completions 200","status":200,"ttft_ms":31}
// A line carries the request id when it was logged on behalf of one (empty: none), and any
// number of named fields (strings, integers, doubles, booleans), which JSON keeps typed. Nothing
// else is ever printed to stderr by the library (a CLI's own usage errors aside).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace kvasir::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };
enum class Format { kText, kJson };

// Parses "debug" | "info" | "warn" | "error" | "off" and "text" | "json"; throws kvasir::Error
// naming `what` otherwise.
Level parse_level(std::string_view name, std::string_view what = "--log-level");
Format parse_format(std::string_view name, std::string_view what = "--log-format");

// Process-wide settings (default: info, text). Call before other threads log.
void configure(Level min_level, Format format);
Level level();
bool enabled(Level l);

struct Field {
  std::string_view name;
  std::variant<std::string_view, int64_t, double, bool> value;
  Field(std::string_view n, std::string_view v) : name(n), value(v) {}
  Field(std::string_view n, const std::string& v) : name(n), value(std::string_view(v)) {}
  Field(std::string_view n, const char* v) : name(n), value(std::string_view(v)) {}
  Field(std::string_view n, int v) : name(n), value(int64_t{v}) {}
  Field(std::string_view n, int64_t v) : name(n), value(v) {}
  Field(std::string_view n, uint64_t v) : name(n), value(static_cast<int64_t>(v)) {}
  Field(std::string_view n, double v) : name(n), value(v) {}
  Field(std::string_view n, bool v) : name(n), value(v) {}
};

// One line: level, message, the request it belongs to (may be empty), fields.
void write(Level l, std::string_view request_id, std::string_view message,
           std::initializer_list<Field> fields = {});
void write(Level l, std::string_view request_id, std::string_view message,
           std::span<const Field> fields);

template <class... A>
void debug(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::kDebug)) write(Level::kDebug, {}, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void info(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::kInfo)) write(Level::kInfo, {}, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::kWarn)) write(Level::kWarn, {}, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void error(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::kError)) write(Level::kError, {}, fmt::format(f, std::forward<A>(a)...));
}

// The text of one line as write() would print it (tests).
std::string format_line(Level l, std::string_view request_id, std::string_view message,
                        std::span<const Field> fields, Format format, int64_t unix_ms);

}  // namespace kvasir::log
