#include "kvasir/util/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "kvasir/util/error.h"

namespace kvasir::log {

namespace {

std::atomic<Level> g_level{Level::kInfo};
std::atomic<Format> g_format{Format::kText};

// The line is formatted here (timestamp included, so JSON lines stay valid JSON); spdlog only
// writes it, thread-safely, to stderr.
spdlog::logger& sink() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("kvasir",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%v");
    l->set_level(spdlog::level::trace);
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *logger;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
    case Level::kOff:
      return "off";
  }
  return "info";
}

std::string timestamp(int64_t unix_ms) {
  const std::time_t s = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, unix_ms % 1000);
}

}  // namespace

Level parse_level(std::string_view name, std::string_view what) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff})
    if (name == level_name(l)) return l;
  if (name == "warning") return Level::kWarn;
  fail("{}: expected debug, info, warn, error or off, got '{}'", what, name);
}

Format parse_format(std::string_view name, std::string_view what) {
  if (name == "text") return Format::kText;
  if (name == "json") return Format::kJson;
  fail("{}: expected text or json, got '{}'", what, name);
}

void configure(Level min_level, Format format) {
  g_level = min_level;
  g_format = format;
}

Level level() {
  return g_level.load();
}

bool enabled(Level l) {
  return l != Level::kOff && l >= g_level.load(std::memory_order_relaxed);
}

std::string format_line(Level l, std::string_view request_id, std::string_view message,
                        std::span<const Field> fields, Format format, int64_t unix_ms) {
  if (format == Format::kJson) {
    nlohmann::ordered_json j;
    j["ts"] = timestamp(unix_ms);
    j["level"] = level_name(l);
    if (!request_id.empty()) j["request_id"] = request_id;
    j["msg"] = message;
    for (const Field& f : fields) {
      std::visit([&](const auto& v) { j[std::string(f.name)] = v; }, f.value);
    }
    // Invalid UTF-8 (a client's bytes in a message) is replaced, never a throw.
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  std::string line = timestamp(unix_ms);
  std::string lvl = level_name(l);
  for (char& ch : lvl) ch = static_cast<char>(ch - 'a' + 'A');
  line += fmt::format(" {:<5} ", lvl);
  if (!request_id.empty()) line += fmt::format("[{}] ", request_id);
  line += message;
  for (const Field& f : fields) {
    line += ' ';
    line += f.name;
    line += '=';
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string_view>) {
            const bool quote = v.empty() || v.find_first_of(" \"=") != std::string_view::npos;
            if (quote) {
              line += '"';
              for (char ch : v) line += ch == '"' ? std::string("\\\"") : std::string(1, ch);
              line += '"';
            } else {
              line += v;
            }
          } else if constexpr (std::is_same_v<T, bool>) {
            line += v ? "true" : "false";
          } else if constexpr (std::is_same_v<T, double>) {
            line += fmt::format("{:.6g}", v);
          } else {
            line += fmt::format("{}", v);
          }
        },
        f.value);
  }
  return line;
}

void write(Level l, std::string_view request_id, std::string_view message,
           std::initializer_list<Field> fields) {
  write(l, request_id, message, std::span<const Field>(fields.begin(), fields.size()));
}

void write(Level l, std::string_view request_id, std::string_view message,
           std::span<const Field> fields) {
  if (!enabled(l)) return;
  const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  sink().info(format_line(l, request_id, message, fields, g_format.load(), ms));
}

}  // namespace kvasir::log
