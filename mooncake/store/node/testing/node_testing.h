// Options for StoreNodes in tests: loopback, any free ports, small segments,
// fast heartbeats and ticks.
#ifndef MOONCAKE_STORE_NODE_TESTING_NODE_TESTING_H_
#define MOONCAKE_STORE_NODE_TESTING_NODE_TESTING_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "mooncake/store/node/store_node_options.h"

namespace mooncake::node_testing {

inline node::StoreNodeOptions TestNodeOptions(node::Role role, std::string master = "") {
  node::StoreNodeOptions o;
  o.role = role;
  o.listen = {"127.0.0.1", 0};
  o.http = {"127.0.0.1", 0};
  if (!master.empty()) {
    o.master = *node::ParseHostPort("master", master, false);
  }
  o.segment_bytes = uint64_t{16} << 20;
  o.max_object_bytes = uint64_t{4} << 20;
  o.tick_interval_ms = 20;
  o.heartbeat_interval_ms = 100;
  o.heartbeat_timeout_ms = 3'000;  // a loaded 2-core CI machine: no false expiry
  o.drain_ms = 50;
  return o;
}

// A loopback port nothing listens on (bound, then released).
inline uint16_t UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace mooncake::node_testing

#endif  // MOONCAKE_STORE_NODE_TESTING_NODE_TESTING_H_
