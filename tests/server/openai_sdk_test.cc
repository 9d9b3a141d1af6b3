// Runs tests/server/openai_sdk_test.mjs: the official `openai` npm SDK against a live server.
// Skipped (with the reason) when node or the SDK is missing; install the SDK with
// scripts/install-openai-sdk.sh (into ${KVASIR_CACHE:-$HOME/.cache/kvasir}/openai).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "server_test_util.h"
#include "test_util/node.h"

namespace kvasir::server::testing {
namespace {

TEST(OpenAISdk, OfficialClientWorks) {
  if (!test_util::node_available())
    GTEST_SKIP() << "node is not installed (apt-get install nodejs npm)";
  const std::string sdk = test_util::openai_sdk_dir();
  if (const std::string pkg = test_util::missing_sdk_package({"openai"}); !pkg.empty())
    GTEST_SKIP() << "the npm package " << pkg << " is not installed in " << sdk
                 << "; run scripts/install-openai-sdk.sh";
  ServerConfig sc = test_server_config();
  sc.api_keys = ApiKeys({"sk-sdk-test"});
  TestServer srv(test_engine_config(), sc);
  const std::string cmd = "KVASIR_OPENAI_SDK='" + sdk +
                          "' KVASIR_BASE_URL='http://127.0.0.1:" + std::to_string(srv.port) +
                          "/v1' KVASIR_API_KEY='sk-sdk-test' KVASIR_MODEL='stories260K' " +
                          "timeout 120 node '" + std::string(KVASIR_SOURCE_DIR) +
                          "/tests/server/openai_sdk_test.mjs' 2>&1";
  const test_util::ScriptResult r = test_util::run_script(cmd);
  const std::string& out = r.output;
  EXPECT_EQ(r.status, 0) << out;
  EXPECT_NE(out.find("all ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvasir::server::testing
