// util/log.h: the text and JSON line formats, level parsing and filtering.
#include "kvasir/util/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvasir/util/error.h"

namespace kvasir::log {
namespace {

constexpr int64_t kMs = 1764628201123;  // 2025-12-01T22:30:01.123Z

TEST(Log, TextLinesCarryTimeLevelRequestIdAndFields) {
  const Field fields[] = {{"status", 200}, {"ttft_ms", 31.5}, {"key", "team a"}, {"stream", true}};
  const std::string line =
      format_line(Level::kInfo, "req-1", "POST /v1/completions", fields, Format::kText, kMs);
  EXPECT_EQ(line,
            "2025-12-01T22:30:01.123Z INFO  [req-1] POST /v1/completions status=200 ttft_ms=31.5 "
            "key=\"team a\" stream=true");
  EXPECT_EQ(format_line(Level::kWarn, "", "x", {}, Format::kText, kMs),
            "2025-12-01T22:30:01.123Z WARN  x");
}

TEST(Log, JsonLinesParseAndKeepTypes) {
  const Field fields[] = {{"status", 500}, {"dur", 0.25}, {"route", "/v1/chat/completions"}};
  const std::string line = format_line(Level::kError, "req-2", "a \"quoted\"\nmessage \xff",
                                       fields, Format::kJson, kMs);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ts"], "2025-12-01T22:30:01.123Z");
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["request_id"], "req-2");
  EXPECT_EQ(j["status"], 500);
  EXPECT_DOUBLE_EQ(j["dur"].get<double>(), 0.25);
  EXPECT_EQ(j["route"], "/v1/chat/completions");
  EXPECT_NE(j["msg"].get<std::string>().find("quoted"), std::string::npos);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line";
  EXPECT_FALSE(nlohmann::json::parse(format_line(Level::kInfo, "", "m", {}, Format::kJson, kMs))
                   .contains("request_id"));
}

TEST(Log, LevelsParseAndFilter) {
  EXPECT_EQ(parse_level("debug"), Level::kDebug);
  EXPECT_EQ(parse_level("warning"), Level::kWarn);
  EXPECT_EQ(parse_format("json"), Format::kJson);
  EXPECT_THROW(parse_level("loud"), Error);
  EXPECT_THROW(parse_format("xml"), Error);
  configure(Level::kWarn, Format::kText);
  EXPECT_FALSE(enabled(Level::kInfo));
  EXPECT_TRUE(enabled(Level::kError));
  configure(Level::kOff, Format::kText);
  EXPECT_FALSE(enabled(Level::kError));
  configure(Level::kInfo, Format::kText);
}

}  // namespace
}  // namespace kvasir::log
