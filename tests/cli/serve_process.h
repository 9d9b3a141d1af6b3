// ServeProcess: `kvasir serve` as a child process for the CLI tests (the real binary on a real
// loopback socket): its port read from the startup log line, its log, SIGTERM for shutdown.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.h"

namespace kvasir::cli_test {

// `kvasir serve --port 0 ARGS` (ARGS may give --port) as a child process; the port is read from its
// startup line. The port of the log line "serving 'NAME' on http://HOST:PORT" (0 while not printed
// yet). Plain string search: GCC 12's std::regex trips -Wmaybe-uninitialized under the sanitizers.
inline int served_port(const std::string& log) {
  const size_t at = log.find("serving '");
  if (at == std::string::npos) return 0;
  size_t url = log.find(" on http://", at);
  if (url == std::string::npos) url = log.find(" on https://", at);
  if (url == std::string::npos) return 0;
  const size_t colon = log.find(':', log.find("://", url) + 3);
  if (colon == std::string::npos) return 0;
  size_t end = colon + 1;
  while (end < log.size() && std::isdigit(static_cast<unsigned char>(log[end]))) ++end;
  if (end == colon + 1 || end == log.size()) return 0;  // digits not complete yet
  return std::stoi(log.substr(colon + 1, end - colon - 1));
}

class Server {
 public:
  // `env`: NAME=VALUE settings for the server's environment.
  explicit Server(const std::vector<std::string>& args, const std::vector<std::string>& env = {})
      : log_(tmp("serve-" + std::to_string(++count_) + ".log")) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::dup2(fd, 1);
      for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<std::string> all{bin(), "serve"};
      if (std::find(args.begin(), args.end(), "--port") == args.end())
        all.insert(all.end(), {"--port", "0"});
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 600 && port_ == 0; ++i) {  // up to 60 s (a loaded CI machine)
      port_ = served_port(read_file(log_));
      int status = 0;
      if (port_ == 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string log() const { return read_file(log_); }
  // SIGTERM, then the exit status (-1 if it did not exit within 30 s).
  int terminate() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 300; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }

 private:
  static inline int count_ = 0;  // each server its own log: never read an earlier one's port
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace kvasir::cli_test
