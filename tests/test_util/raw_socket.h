// A raw loopback TCP connection, for tests of clients that misbehave where an HTTP client library
// would hide the bytes: heads and bodies sent in pieces, connections that never read (a small
// receive buffer, set before connecting), half-closes, pipelining.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvasir::test_util {

inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct RawSocket {
  int fd = -1;
  // rcvbuf > 0: a small receive buffer, set before connecting (afterwards the kernel has
  // already chosen the window it advertises, and autotuning may grow it).
  explicit RawSocket(int port, int rcvbuf = 0) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~RawSocket() {
    if (fd >= 0) ::close(fd);
  }
  bool ok() const { return fd >= 0; }
  // Sends everything; false once the peer stops taking bytes (closed or reset).
  bool send_all(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until `stop` is in what was read, the peer closes, or timeout_s passes.
  std::string read_until(std::string_view stop, double timeout_s) {
    std::string out;
    const double until = seconds_now() + timeout_s;
    char buf[16384];
    while (seconds_now() < until) {
      if (!stop.empty() && out.find(stop) != std::string::npos) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // True once the peer closed the connection (EOF or reset) within timeout_s.
  bool closed_within(double timeout_s) {
    const double until = seconds_now() + timeout_s;
    char buf[4096];
    while (seconds_now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      if (::recv(fd, buf, sizeof(buf), 0) <= 0) return true;
    }
    return false;
  }
};

}  // namespace kvasir::test_util
