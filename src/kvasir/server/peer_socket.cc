#include "kvasir/server/peer_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kvasir::server {

namespace {

// The textual address and port of a socket address (as inet_ntop writes it, which is what
// httplib reports). IPv4-mapped IPv6 addresses are written as the IPv6 text.
bool address_of(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

bool matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  std::string addr;
  int port = -1;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  if (!address_of(ss, addr, port) || port != remote_port || addr != remote_addr) return false;
  len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  return address_of(ss, addr, port) && port == local_port && addr == local_addr;
}

}  // namespace

int find_connection_fd(const std::string& local_addr, int local_port,
                       const std::string& remote_addr, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return -1;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat st{};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (matches(static_cast<int>(fd), local_addr, local_port, remote_addr, remote_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{};
  p.fd = fd;
  p.events = POLLIN | POLLRDHUP;
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    // Readable: either data (a pipelined request; the client is still there) or end of stream.
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

}  // namespace kvasir::server
