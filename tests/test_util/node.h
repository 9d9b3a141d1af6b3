// Optional Node.js references (node-llama-cpp, the openai npm SDK): cache_dir(), the folder the
// install scripts put them in (${KVASIR_CACHE:-$HOME/.cache/kvasir}), node_available(),
// missing_sdk_package() and run_script() (a node script's exit status and output). Tests that
// need them skip themselves, with the reason, when they are missing.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>

namespace kvasir::test_util {

inline std::string cache_dir() {
  if (const char* c = std::getenv("KVASIR_CACHE"); c && *c) return c;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/kvasir";
}

inline bool node_available() {
  return std::system("node --version > /dev/null 2>&1") == 0;
}

// The openai SDK's folder (scripts/install-openai-sdk.sh installs it and its companions there).
inline std::string openai_sdk_dir() {
  return cache_dir() + "/openai";
}

// The first of `packages` not installed in openai_sdk_dir(), or "" when all are.
inline std::string missing_sdk_package(std::initializer_list<const char*> packages) {
  for (const char* pkg : packages)
    if (!std::filesystem::exists(openai_sdk_dir() + "/node_modules/" + pkg + "/package.json"))
      return pkg;
  return "";
}

struct ScriptResult {
  int status = -1;     // pclose's status: 0 when the command exited 0
  std::string output;  // stdout and stderr together (the command should end with 2>&1)
};

// Runs a shell command line and gathers its output.
inline ScriptResult run_script(const std::string& cmd) {
  ScriptResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  r.status = pclose(p);
  return r;
}

}  // namespace kvasir::test_util
