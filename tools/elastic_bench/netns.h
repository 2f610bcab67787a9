// NetnsHosts: N network namespaces, each joined to a bridge in the root
// namespace by a veth pair whose namespace side sends through a token bucket
// (`tc qdisc ... tbf`), so that N store workers on one machine each get a
// link of their own of a set rate (elastic_bench's skew scenario: a
// loopback-only cluster on 2 cores is CPU-bound, never
// per-worker-link-bound). The bridge makes one subnet of the root namespace
// and every host, so workers reach each other (copies between workers)
// without IP forwarding.
//
//   bridge "eb<pid>b" with 10.77.<s>.1/24 in the root namespace; host i:
//   namespace "eb<pid>n<i>", address 10.77.<s>.<i+2>/24, where s = pid % 250:
//   runs of other processes get other names and (mostly) other subnets.
//
// Needs root (CAP_NET_ADMIN) and iproute2; Create fails with a message saying
// which. The destructor deletes every namespace (its veth goes with it) and
// the bridge, also after a failed Create.
//
// Thread-safety: one owning thread.
#ifndef MOONCAKE_TOOLS_ELASTIC_BENCH_NETNS_H_
#define MOONCAKE_TOOLS_ELASTIC_BENCH_NETNS_H_

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"

namespace mooncake::elastic_bench {

struct NetHost {
  std::string ns;         // the namespace's name
  std::string root_addr;  // the bridge's address (what the worker reaches the master by)
  std::string addr;       // the worker's address in the namespace
  std::string root_if;    // the veth's root-namespace end (receives what the host sends)
};

struct LinkShape {
  std::string rate = "1gbit";  // tc tbf rate
  std::string burst = "256kb";
  std::string latency = "50ms";
};

class NetnsHosts {
 public:
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;
  ~NetnsHosts() {
    for (const NetHost& h : hosts_) {
      Run(absl::StrCat("ip netns del ", h.ns));  // deletes the veth pair with it
    }
    if (!bridge_.empty()) Run(absl::StrCat("ip link del ", bridge_));
  }

  static absl::StatusOr<std::unique_ptr<NetnsHosts>> Create(int n, const LinkShape& shape) {
    MC_ASSERT(n >= 1 && n <= 4, "at most 4 hosts per run (the subnet scheme)");
    if (geteuid() != 0) {
      return absl::PermissionDeniedError(
          "network namespaces need root (CAP_NET_ADMIN): run as root or skip the skew scenario");
    }
    std::unique_ptr<NetnsHosts> set(new NetnsHosts());
    const int pid = static_cast<int>(getpid());
    const std::string net = absl::StrCat("10.77.", pid % 250, ".");
    const std::string bridge = absl::StrCat("eb", pid, "b");
    for (const std::string& cmd : {absl::StrCat("ip link add ", bridge, " type bridge"),
                                   absl::StrCat("ip addr add ", net, "1/24 dev ", bridge),
                                   absl::StrCat("ip link set ", bridge, " up")}) {
      if (!Run(cmd)) return absl::UnavailableError(absl::StrCat("`", cmd, "` failed"));
      set->bridge_ = bridge;
    }
    for (int i = 0; i < n; ++i) {
      const std::string ns = absl::StrCat("eb", pid, "n", i);
      const std::string root_if = absl::StrCat("eb", pid, "r", i);
      const std::string ns_if = absl::StrCat("eb", pid, "w", i);
      if (!Run(absl::StrCat("ip netns add ", ns))) {
        return absl::UnavailableError(absl::StrCat("`ip netns add ", ns, "` failed"));
      }
      const std::string addr = absl::StrCat(net, i + 2);
      set->hosts_.push_back({ns, net + "1", addr, root_if});
      const std::string in_ns = absl::StrCat("ip netns exec ", ns, " ");
      for (const std::string& cmd : {
               absl::StrCat("ip link add ", root_if, " type veth peer name ", ns_if),
               absl::StrCat("ip link set ", ns_if, " netns ", ns),
               absl::StrCat("ip link set ", root_if, " master ", bridge),
               absl::StrCat("ip link set ", root_if, " up"),
               absl::StrCat(in_ns, "ip addr add ", addr, "/24 dev ", ns_if),
               absl::StrCat(in_ns, "ip link set ", ns_if, " up"),
               absl::StrCat(in_ns, "ip link set lo up"),
               absl::StrCat(in_ns, "tc qdisc add dev ", ns_if, " root tbf rate ", shape.rate,
                            " burst ", shape.burst, " latency ", shape.latency),
           }) {
        if (!Run(cmd)) return absl::UnavailableError(absl::StrCat("`", cmd, "` failed"));
      }
    }
    return set;
  }

  const std::vector<NetHost>& hosts() const { return hosts_; }

  // Bytes host i has sent over its link so far (its veth's root end's
  // receive counter); -1 if unreadable.
  int64_t SentBytes(int i) const {
    std::ifstream f(absl::StrCat("/sys/class/net/", hosts_[i].root_if, "/statistics/rx_bytes"));
    int64_t v = -1;
    if (!(f >> v)) return -1;
    return v;
  }

 private:
  NetnsHosts() = default;

  static bool Run(const std::string& cmd) {
    return std::system(absl::StrCat(cmd, " >/dev/null 2>&1").c_str()) == 0;
  }

  std::vector<NetHost> hosts_;
  std::string bridge_;  // empty until created
};

}  // namespace mooncake::elastic_bench

#endif  // MOONCAKE_TOOLS_ELASTIC_BENCH_NETNS_H_
