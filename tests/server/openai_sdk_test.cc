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

std::string sdk_dir() {
  return test_util::cache_dir() + "/openai";
}

TEST(OpenAISdk, OfficialClientWorks) {
  if (!test_util::node_available())
    GTEST_SKIP() << "node is not installed (apt-get install nodejs npm)";
  const std::string sdk = sdk_dir();
  if (!std::filesystem::exists(sdk + "/node_modules/openai/package.json"))
    GTEST_SKIP() << "the openai npm SDK is not installed in " << sdk
                 << "; run scripts/install-openai-sdk.sh";
  ServerConfig sc = test_server_config();
  sc.api_keys = ApiKeys({"sk-sdk-test"});
  TestServer srv(test_engine_config(), sc);
  const std::string cmd = "KVASIR_OPENAI_SDK='" + sdk +
                          "' KVASIR_BASE_URL='http://127.0.0.1:" + std::to_string(srv.port) +
                          "/v1' KVASIR_API_KEY='sk-sdk-test' KVASIR_MODEL='stories260K' " +
                          "timeout 120 node '" + std::string(KVASIR_SOURCE_DIR) +
                          "/tests/server/openai_sdk_test.mjs' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvasir::server::testing
