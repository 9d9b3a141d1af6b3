// Runs tests/server/structured_output_sdk_test.mjs: structured output (20 JSON schemas, zod,
// streaming, json_object) and tool calls (Hermes and Llama 3.x templates from ../shared/templates)
// through the official `openai` npm SDK, answers validated by ajv. Skipped (with the reason) when
// node or the SDK is missing; scripts/install-openai-sdk.sh installs them.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "server_test_util.h"
#include "test_util/node.h"

namespace kvasir::server::testing {
namespace {

std::string template_path(const std::string& name) {
  return test_util::shared_templates_dir() + "/" + name;
}

TEST(StructuredOutputSdk, SchemasZodJsonObjectAndToolCalls) {
  if (!test_util::node_available())
    GTEST_SKIP() << "node is not installed (apt-get install nodejs npm)";
  const std::string sdk = test_util::openai_sdk_dir();
  if (const std::string pkg =
          test_util::missing_sdk_package({"openai", "zod", "ajv", "ajv-formats"});
      !pkg.empty())
    GTEST_SKIP() << "the npm package " << pkg << " is not installed in " << sdk
                 << "; run scripts/install-openai-sdk.sh";
  EngineConfig ec = test_engine_config();
  ServerConfig hermes_cfg = test_server_config();
  hermes_cfg.chat_template =
      test_util::read_file(template_path("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"));
  ServerConfig llama_cfg = test_server_config();
  llama_cfg.chat_template =
      test_util::read_file(template_path("meta-llama-Llama-3.3-70B-Instruct.jinja"));
  TestServer hermes(ec, hermes_cfg);
  TestServer llama3(ec, llama_cfg);
  const std::string cmd =
      "KVASIR_OPENAI_SDK='" + sdk +
      "' KVASIR_BASE_URL='http://127.0.0.1:" + std::to_string(hermes.port) +
      "/v1' KVASIR_BASE_URL_LLAMA3='http://127.0.0.1:" + std::to_string(llama3.port) +
      "/v1' KVASIR_MODEL='stories260K' KVASIR_SCHEMAS='" +
      data_path("structured_output_schemas.json") + "' KVASIR_BRACE_TOKEN=" +
      std::to_string(Stories260K::get().tok.encode("}", false, false).back()) +
      " KVASIR_EOS_TOKEN=" + std::to_string(Stories260K::get().tok.eos_id()) +
      " timeout 300 node '" + std::string(KVASIR_SOURCE_DIR) +
      "/tests/server/structured_output_sdk_test.mjs' 2>&1";
  const test_util::ScriptResult r = test_util::run_script(cmd);
  const std::string& out = r.output;
  EXPECT_EQ(r.status, 0) << out;
  EXPECT_NE(out.find("all ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvasir::server::testing
