// Noticing that the client of a non-streaming request hung up.
//
// cpp-httplib 0.11.4 (Debian's) hands a handler the request but not its socket, and a
// non-streaming handler writes nothing until the generation ends, so a client that left would
// otherwise cost the whole generation. find_connection_fd() recovers the socket from the
// addresses httplib does give (local and remote address and port): it is the one open socket of
// this process with exactly that pair, and it stays open (so its number cannot be reused) until
// the handler returns. peer_closed() then asks, without blocking or consuming data, whether the
// peer has closed its side (an orderly FIN, a reset, or a hang-up).
//
// Linux only (/proc/self/fd). Newer cpp-httplib versions have Request::is_connection_closed();
// this file goes away with an upgrade.
#pragma once

#include <string>

namespace kvasir::server {

// The file descriptor of the TCP connection local_addr:local_port <-> remote_addr:remote_port
// (IPv4 or IPv6 textual addresses, as httplib reports them), or -1 if none is found.
int find_connection_fd(const std::string& local_addr, int local_port,
                       const std::string& remote_addr, int remote_port);

// True if the peer of the connected socket `fd` has closed or reset the connection. Data the
// client sent (e.g. a pipelined request) is left unread.
bool peer_closed(int fd);

}  // namespace kvasir::server
