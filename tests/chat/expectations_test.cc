// Kvasir's template engine against Python's Jinja2 (configured as Hugging Face does): every case
// in tests/chat/data (written by scripts/gen-template-expectations.py) must render byte for byte
// as Jinja2 rendered it, or fail as Jinja2 failed. For runtime errors the exception type and the
// message must both match; syntax errors (worded differently, and carrying a column) and resource
// limits (Jinja2 hits Python's recursion limit, Kvasir its own depth limit) match on kind only,
// as do cases named "errtype_*" whose Python message names Jinja2's internal functions.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvasir/chat/chat_template.h"
#include "test_util/files.h"

namespace kvasir::chat {
namespace {

using json = nlohmann::ordered_json;

std::string data_dir() {
  return KVASIR_SOURCE_DIR "/tests/chat/data";
}
std::string templates_dir() {
  return KVASIR_SOURCE_DIR "/../shared/templates";
}

std::string read_file(const std::string& path) {
  std::string s;
  if (!test_util::read_file(path, s)) throw std::runtime_error("cannot read " + path);
  return s;
}

json read_json(const std::string& path) {
  return json::parse(read_file(path));
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

struct Case {
  std::string file;  // data file
  size_t index;      // case index in it
  std::string name;  // test name
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::vector<Case> list_cases(const std::string& file, const std::string& prefix) {
  std::vector<Case> out;
  json doc;
  try {
    doc = read_json(file);
  } catch (const std::exception& e) {
    // Reported by the test itself (a missing data file must fail, not vanish).
    out.push_back({file, SIZE_MAX, prefix + "_missing_data"});
    return out;
  }
  for (size_t i = 0; i < doc["cases"].size(); ++i)
    out.push_back({file, i, prefix + "_" + sanitize(doc["cases"][i]["name"].get<std::string>())});
  return out;
}

std::vector<Case> template_cases() {
  std::vector<Case> out;
  for (const char* stem : {"LFM2.5-Instruct", "Mistral-Small-3.2-24B-Instruct-2506",
                           "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Qwen-QwQ-32B",
                           "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "ibm-granite-granite-4.0",
                           "meta-llama-Llama-3.3-70B-Instruct"}) {
    auto cases = list_cases(data_dir() + "/templates/" + stem + ".json", sanitize(stem));
    out.insert(out.end(), cases.begin(), cases.end());
  }
  return out;
}

// Checks a render outcome against the case's "expected" or "error".
void check_outcome(const json& c, const std::function<std::string()>& render) {
  const std::string name = c["name"].get<std::string>();
  if (c.contains("expected")) {
    std::string got;
    try {
      got = render();
    } catch (const std::exception& e) {
      FAIL() << "expected a rendering, got an error: " << e.what();
    }
    EXPECT_EQ(got, c["expected"].get<std::string>());
    return;
  }
  ASSERT_TRUE(c.contains("error")) << "case has neither expected nor error";
  const std::string type = c["error"]["type"].get<std::string>();
  const std::string message = c["error"]["message"].get<std::string>();
  try {
    std::string got = render();
    FAIL() << "expected " << type << " (" << message << "), got a rendering:\n" << got;
  } catch (const TemplateError& e) {
    if (type == "TemplateSyntaxError" || type == "SyntaxError") {
      EXPECT_EQ(e.kind(), ErrorKind::Syntax) << e.what();
      EXPECT_GT(e.line(), 0) << "syntax errors carry a line: " << e.what();
    } else if (type == "LimitExceeded") {
      EXPECT_EQ(e.kind(), ErrorKind::Limit) << e.what();
    } else {
      EXPECT_EQ(std::string(error_kind_name(e.kind())), type) << e.what();
      if (name.rfind("errtype_", 0) != 0) {
        EXPECT_EQ(e.message(), message) << e.what();
      }
      EXPECT_GT(e.line(), 0) << "runtime errors carry a line: " << e.what();
    }
  }
}

class TemplateExpectation : public ::testing::TestWithParam<Case> {};

TEST_P(TemplateExpectation, RendersLikeJinja2) {
  const Case& param = GetParam();
  ASSERT_NE(param.index, SIZE_MAX) << "cannot read " << param.file;
  json doc = read_json(param.file);
  const json& c = doc["cases"][param.index];
  std::string source = read_file(templates_dir() + "/" + doc["template"].get<std::string>());
  ChatTemplate t = ChatTemplate::parse(source);
  RenderOptions opts;
  opts.now = doc["now"].get<int64_t>();
  check_outcome(c, [&] {
    json ctx = chat_context(c["messages"], c["add_generation_prompt"].get<bool>(),
                            c["bos_token"].get<std::string>(), c["eos_token"].get<std::string>(),
                            c["tools"], c["extra"]);
    return t.render(ctx, opts);
  });
}

INSTANTIATE_TEST_SUITE_P(Templates, TemplateExpectation, ::testing::ValuesIn(template_cases()),
                         [](const auto& info) { return info.param.name; });

class FeatureExpectation : public ::testing::TestWithParam<Case> {};

TEST_P(FeatureExpectation, RendersLikeJinja2) {
  const Case& param = GetParam();
  ASSERT_NE(param.index, SIZE_MAX) << "cannot read " << param.file;
  json doc = read_json(param.file);
  const json& c = doc["cases"][param.index];
  const json& ctx = c.contains("context") ? c["context"] : doc["default_context"];
  RenderOptions opts;
  opts.now = doc["now"].get<int64_t>();
  SCOPED_TRACE(c["template"].get<std::string>());
  check_outcome(
      c, [&] { return ChatTemplate::parse(c["template"].get<std::string>()).render(ctx, opts); });
}

INSTANTIATE_TEST_SUITE_P(Features, FeatureExpectation,
                         ::testing::ValuesIn(list_cases(data_dir() + "/features.json", "f")),
                         [](const auto& info) { return info.param.name; });

// The data must cover every template in the shared folder, so a new template cannot be missed.
TEST(TemplateExpectationData, CoversEverySharedTemplate) {
  std::vector<std::string> listed;
  for (const Case& c : template_cases()) listed.push_back(c.file);
  size_t templates = 0;
  for (const auto& entry : std::filesystem::directory_iterator(templates_dir())) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    std::string data = data_dir() + "/templates/" + entry.path().stem().string() + ".json";
    EXPECT_NE(std::find(listed.begin(), listed.end(), data), listed.end())
        << entry.path() << " has no expectations in the test list";
  }
  EXPECT_GE(templates, 7u);
}

}  // namespace
}  // namespace kvasir::chat
