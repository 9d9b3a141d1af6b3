// `kvasir eval golden`: recording a golden set from a model, replaying it (pass rate, where a
// case diverged, exit status), and the errors of a malformed set.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

std::string write(const std::string& name, const std::string& text) {
  const std::string path = tmp(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(CliEvalGolden, RecordsAndReplaysAndNamesTheDivergence) {
  const std::string prompts = write("prompts.jsonl",
                                    "# stories260K prompts\n"
                                    "{\"id\": \"lily\", \"prompt\": \"Once upon a time\"}\n"
                                    "\n"
                                    "{\"prompt\": \"The little dog\", \"max_tokens\": 24}\n");
  const std::string golden = tmp("golden.jsonl");
  Result r = kvasir("eval golden -m " + stories() + " --set " + prompts + " --record " + golden);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string rec = read_file(golden);
  // The model's authors published its greedy story; the recording starts with it.
  EXPECT_NE(rec.find("\"expected\":\", there was a little girl named Lily. She loved to play "
                     "outside in the park."),
            std::string::npos)
      << rec;
  EXPECT_NE(rec.find("\"id\":\"line 4\""), std::string::npos) << rec;

  r = kvasir("eval golden -m " + stories() + " --set " + golden + " --json");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("passed").get<int>(), 2);
  EXPECT_EQ(j.at("pass_rate").get<double>(), 1.0);

  // An expected continuation the model does not produce: where it diverged, exit status 1.
  const std::string bad = write("bad.jsonl",
                                "{\"id\": \"x\", \"prompt\": \"Once upon a time\", \"expected\": "
                                "\", there was a little boy\"}\n"
                                "{\"id\": \"y\", \"prompt\": \"Once upon a time\", \"contains\": "
                                "\"Lily\"}\n");
  r = kvasir("eval golden -m " + stories() + " --set " + bad);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("FAIL x: diverged at character 21 (generated token"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("expected \"boy\", got \"girl"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 of 2 cases pass (50.0%), KV f16"), std::string::npos) << r.out;

  // The same set with a quantized KV cache runs (its pass rate is what the quality report shows).
  r = kvasir("eval golden -m " + stories() + " --set " + golden + " --kv-dtype int8 --json");
  ASSERT_NE(r.out.find("\"kv_type\":\"int8\""), std::string::npos) << r.err << r.out;
}

TEST(CliEvalGolden, RefusesAMalformedSetByLineAndField) {
  const std::pair<const char*, const char*> cases[] = {
      {"{\"prompt\": \"a\", \"expected\": \"b\", \"temperature\": 1}\n",
       ":1: unknown field 'temperature'"},
      {"\n{\"expected\": \"b\"}\n", ":2: field 'prompt' is missing"},
      {"{\"prompt\": 3, \"expected\": \"b\"}\n", ":1: field 'prompt': expected a string"},
      {"{\"prompt\": \"a\"}\n", ":1: neither 'expected' nor 'contains'"},
      {"{\"prompt\": \"a\", \"contains\": \"b\", \"max_tokens\": 0}\n",
       ":1: field 'max_tokens': expected an integer in 1..65536"},
      {"{\"prompt\": \"a\",\n", ":1: not valid JSON"},
      {"# nothing\n", ": no cases"},
  };
  for (const auto& [text, want] : cases) {
    const std::string path = write("malformed.jsonl", text);
    Result r = kvasir("eval golden -m " + stories() + " --set " + path);
    EXPECT_EQ(r.code, 1) << text;
    EXPECT_NE(r.err.find(path + want), std::string::npos) << text << ": " << r.err;
  }
}

}  // namespace
}  // namespace kvasir::cli_test
