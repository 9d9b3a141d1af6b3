// Files for tests: temp_dir(prefix), a scratch folder per test process (created on first use,
// kept for the process's later tests), and read_file, a whole file's bytes (a bool overload that
// says whether the file could be opened, and a string one that reads a missing file as empty).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kvasir::test_util {

// <system temp>/<prefix>-<pid>.
inline std::string temp_dir(const std::string& prefix = "kvasir-test") {
  auto d = std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

// False (and `out` untouched) when the file cannot be opened.
inline bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

// Empty when the file cannot be opened (e.g. a log its writer has not created yet).
inline std::string read_file(const std::string& path) {
  std::string s;
  read_file(path, s);
  return s;
}

}  // namespace kvasir::test_util
