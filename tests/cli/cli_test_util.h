// Helpers for the CLI tests, which run the real `kvasir` binary: bin() (the binary, $KVASIR_BIN
// when set and not empty), tmp(name) (a file in this process's scratch folder) and
// kvasir(args), one run with stdout and stderr captured separately (kvasir_in(dir, env, args):
// from another folder, with environment changes). Model paths are in test_util/paths.h.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir::cli_test {

using test_util::models_dir;
using test_util::read_file;

inline std::string bin() {
  const char* env = std::getenv("KVASIR_BIN");
  return env && *env ? env : KVASIR_CLI_PATH;
}

inline std::string stories() {
  return test_util::stories260k_path();
}

inline std::string tmp(const std::string& name) {
  return test_util::temp_dir("kvasir-cli") + "/" + name;
}

struct Result {
  int code;
  std::string out, err;
};

// Runs `kvasir ARGS` (args already shell-quoted) with stdout and stderr captured separately.
inline Result kvasir(const std::string& args) {
  std::string o = tmp("stdout"), e = tmp("stderr");
  std::string cmd = bin() + " " + args + " > " + o + " 2> " + e;
  int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_file(o), read_file(e)};
}

// `s` in single quotes, for a shell command line (paths in the tests have no quotes).
inline std::string q(const std::string& s) {
  return "'" + s + "'";
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The same from the folder `dir` ("": this one) with `env` given to env(1) first (assignments
// NAME=VALUE and -u NAME, shell-quoted), e.g. kvasir_in("", "-u KVASIR_MODELS X=1", "run ...").
inline Result kvasir_in(const std::string& dir, const std::string& env, const std::string& args) {
  std::string o = tmp("stdout"), e = tmp("stderr");
  std::string cmd = (dir.empty() ? "" : "cd '" + dir + "' && ") + "env " + env + " " + bin() + " " +
                    args + " > " + o + " 2> " + e;
  int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_file(o), read_file(e)};
}

}  // namespace kvasir::cli_test
