// NetLab: one network namespace per store process, so that the campaign can
// partition, delay, drop and reorder the traffic between chosen processes.
//
//   bridge "mc<pid>b" with 10.79.<s>.1/24 in the root namespace (where etcd
//   and the campaign's clients run); node i: namespace "mc<pid>n<i>", veth
//   "mc<pid>r<i>" (root side, on the bridge) <-> "mc<pid>v<i>" (inside),
//   address 10.79.<s>.<i+2>/24, where s = pid % 250.
//
// A partition is a pair of blackhole routes per peer (node -> peer in the
// node's namespace, peer -> node in the peer's): needs nothing of the kernel
// beyond namespaces. Delay, loss and reordering (impairments, in netem's
// words) take one of two ways, whichever the kernel allows (impairer() says
// which; impairment() says why neither):
// - `tc netem`: each veth end gets `tc qdisc ... root handle 1: prio` with
//   every priority mapped to band 1:1; an impairment puts `netem` on band 1:3
//   and a u32 filter steers the chosen peer's packets into it: on the inside
//   end (the node's egress) by destination, on the root end (the node's
//   ingress) by source.
// - NFQUEUE (packet_impairer.h), for kernels without netem: iptables rules in
//   the node's namespace queue its packets to and from the peer, both ways,
//   and a thread of this process delays, drops or reorders them.
// Peer "" means every address.
//
// Needs root (CAP_NET_ADMIN) and iproute2; Create says which is missing. The
// destructor deletes every namespace (its veth goes with it) and the bridge,
// also after a failed Create; SweepStale removes those of dead campaigns.
//
// Thread-safety: one owning thread.
#ifndef MOONCAKE_TOOLS_CHAOS_NETLAB_H_
#define MOONCAKE_TOOLS_CHAOS_NETLAB_H_

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "tools/chaos/packet_impairer.h"

namespace mooncake::chaos {

inline absl::Status MustSh(const std::string& cmd) {
  if (Sh(cmd)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("`", cmd, "` failed"));
}

class NetLab {
 public:
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;
  ~NetLab() {
    impairers_.clear();
    for (const std::string& ns : namespaces_) Sh(absl::StrCat("ip netns del ", ns));
    if (!bridge_.empty()) Sh(absl::StrCat("ip link del ", bridge_));
  }

  // Deletes the namespaces and bridges named by this scheme whose campaign
  // process is gone (a campaign killed with SIGKILL cannot clean up).
  static void SweepStale() {
    FILE* p = popen("ip -o link show type bridge 2>/dev/null; ip netns list 2>/dev/null", "r");
    if (p == nullptr) return;
    char buf[512];
    std::vector<std::string> dead;
    while (std::fgets(buf, sizeof(buf), p) != nullptr) {
      std::string line(buf);
      const size_t at = line.find("mc");
      if (at == std::string::npos) continue;
      size_t end = at + 2;
      while (end < line.size() && isdigit(static_cast<unsigned char>(line[end]))) ++end;
      int pid = 0;
      if (end == at + 2 || end >= line.size() || (line[end] != 'n' && line[end] != 'b') ||
          !absl::SimpleAtoi(line.substr(at + 2, end - at - 2), &pid)) {
        continue;
      }
      if (kill(pid, 0) == 0) continue;  // its campaign still runs
      size_t name_end = end + 1;
      while (name_end < line.size() && isalnum(static_cast<unsigned char>(line[name_end]))) {
        ++name_end;
      }
      const std::string name = line.substr(at, name_end - at);
      dead.push_back(line[end] == 'b' ? absl::StrCat("ip link del ", name)
                                      : absl::StrCat("ip netns del ", name));
    }
    pclose(p);
    for (const std::string& cmd : dead) Sh(cmd);
  }

  static absl::StatusOr<std::unique_ptr<NetLab>> Create(int nodes) {
    MC_ASSERT(nodes >= 1 && nodes <= 200, "node count out of the subnet");
    if (geteuid() != 0) {
      return absl::PermissionDeniedError("network namespaces need root (CAP_NET_ADMIN)");
    }
    if (!Sh("ip -V") || !Sh("tc -V")) {
      return absl::FailedPreconditionError("iproute2 (ip, tc) is not installed");
    }
    std::unique_ptr<NetLab> lab(new NetLab());
    const int pid = static_cast<int>(getpid());
    lab->prefix_ = absl::StrCat("mc", pid);
    lab->net_ = absl::StrCat("10.79.", pid % 250, ".");
    const std::string bridge = lab->prefix_ + "b";
    RETURN_IF_ERROR(MustSh(absl::StrCat("ip link add ", bridge, " type bridge")));
    lab->bridge_ = bridge;
    RETURN_IF_ERROR(MustSh(absl::StrCat("ip addr add ", lab->net_, "1/24 dev ", bridge)));
    RETURN_IF_ERROR(MustSh(absl::StrCat("ip link set ", bridge, " up")));
    for (int i = 0; i < nodes; ++i) {
      const std::string ns = lab->Namespace(i);
      RETURN_IF_ERROR(MustSh(absl::StrCat("ip netns add ", ns)));
      lab->namespaces_.push_back(ns);
      const std::string in_ns = absl::StrCat("ip netns exec ", ns, " ");
      const std::string r = lab->RootIf(i), v = lab->InnerIf(i);
      for (const std::string& cmd : {
               absl::StrCat("ip link add ", r, " type veth peer name ", v),
               absl::StrCat("ip link set ", v, " netns ", ns),
               absl::StrCat("ip link set ", r, " master ", bridge),
               absl::StrCat("ip link set ", r, " up"),
               absl::StrCat(in_ns, "ip addr add ", lab->Address(i), "/24 dev ", v),
               absl::StrCat(in_ns, "ip link set ", v, " up"),
               absl::StrCat(in_ns, "ip link set lo up"),
           }) {
        RETURN_IF_ERROR(MustSh(cmd));
      }
    }
    lab->ProbeImpairment(nodes);
    return lab;
  }

  // OK if delay, loss and reordering can be injected (by netem, or else
  // through NFQUEUE); else why neither works.
  const absl::Status& impairment() const { return impairment_; }
  // "tc netem" or "NFQUEUE" (empty when impairment() is not OK).
  const std::string& impairer() const { return impairer_; }

  std::string Namespace(int i) const { return absl::StrCat(prefix_, "n", i); }
  std::string Address(int i) const { return absl::StrCat(net_, i + 2); }
  std::string RootAddress() const { return net_ + "1"; }  // etcd and the clients
  // `ip netns exec NS`: what runs node i's process inside its namespace.
  std::vector<std::string> ExecPrefix(int i) const { return {"ip", "netns", "exec", Namespace(i)}; }

  // Cuts node i off from `peers` (addresses; the root address or other
  // nodes'), both ways, by blackhole routes on both sides: packets vanish
  // silently, as on a dead link. Heal(i) removes them.
  absl::Status Partition(int i, const std::vector<std::string>& peers) {
    for (const std::string& peer : peers) {
      const std::string here = absl::StrCat("ip netns exec ", Namespace(i), " ");
      std::string there;  // where the route back to node i goes
      for (size_t j = 0; j < namespaces_.size(); ++j) {
        if (Address(static_cast<int>(j)) == peer)
          there = absl::StrCat("ip netns exec ", namespaces_[j], " ");
      }
      for (const std::string& cmd :
           {absl::StrCat(here, "ip route add blackhole ", peer, "/32"),
            absl::StrCat(there, "ip route add blackhole ", Address(i), "/32")}) {
        if (!Sh(cmd)) {
          Heal(i);
          return absl::UnavailableError(absl::StrCat("`", cmd, "` failed"));
        }
        routes_[i].push_back(absl::StrCat(cmd.substr(0, cmd.find(" route add ")), " route del ",
                                          cmd.substr(cmd.find(" route add ") + 11)));
      }
    }
    return absl::OkStatus();
  }

  // Puts `netem` (e.g. "loss 15%", "delay 80ms 40ms") on node i's traffic
  // with `peer` (an address; "" = every address) both ways. One impairment
  // per node at a time; Heal(i) removes it.
  absl::Status Impair(int i, const std::string& peer, const std::string& netem) {
    RETURN_IF_ERROR(impairment_);
    if (impairer_ == kNfqueue) {
      ASSIGN_OR_RETURN(ImpairSpec spec, ParseImpairSpec(netem));
      ASSIGN_OR_RETURN(impairers_[i],
                       PacketImpairer::Start({.netns = Namespace(i),
                                              .interface = InnerIf(i),
                                              .peer = peer,
                                              .queue = static_cast<uint16_t>(i)},
                                             spec, static_cast<uint64_t>(i) * 7919 + ++starts_));
      return absl::OkStatus();
    }
    const std::string match = peer.empty() ? "0.0.0.0/0" : peer + "/32";
    const std::string in_ns = absl::StrCat("ip netns exec ", Namespace(i), " ");
    for (const std::string& cmd : {
             absl::StrCat("tc qdisc add dev ", RootIf(i), " parent 1:3 handle 30: netem ", netem),
             absl::StrCat("tc filter add dev ", RootIf(i),
                          " parent 1: protocol ip prio 1 u32 match ip src ", match, " flowid 1:3"),
             absl::StrCat(in_ns, "tc qdisc add dev ", InnerIf(i), " parent 1:3 handle 30: netem ",
                          netem),
             absl::StrCat(in_ns, "tc filter add dev ", InnerIf(i),
                          " parent 1: protocol ip prio 1 u32 match ip dst ", match, " flowid 1:3"),
         }) {
      if (!Sh(cmd)) {
        Heal(i);
        return absl::UnavailableError(absl::StrCat("`", cmd, "` failed"));
      }
    }
    return absl::OkStatus();
  }

  // Packets of node i's NFQUEUE impairment so far: "seen S, dropped D,
  // delayed L" (empty with netem or none).
  std::string ImpairedPackets(int i) const {
    auto it = impairers_.find(i);
    if (it == impairers_.end()) return "";
    return absl::StrCat("seen ", it->second->seen(), ", dropped ", it->second->dropped(),
                        ", delayed ", it->second->delayed());
  }

  void Heal(int i) {
    for (const std::string& cmd : routes_[i]) Sh(cmd);
    routes_.erase(i);
    impairers_.erase(i);  // stops it: rules removed, held packets released
    if (impairer_ != kNetem) return;
    const std::string in_ns = absl::StrCat("ip netns exec ", Namespace(i), " ");
    Sh(absl::StrCat("tc filter del dev ", RootIf(i), " parent 1: prio 1"));
    Sh(absl::StrCat("tc qdisc del dev ", RootIf(i), " parent 1:3 handle 30:"));
    Sh(absl::StrCat(in_ns, "tc filter del dev ", InnerIf(i), " parent 1: prio 1"));
    Sh(absl::StrCat(in_ns, "tc qdisc del dev ", InnerIf(i), " parent 1:3 handle 30:"));
  }

 private:
  static constexpr const char* kNetem = "tc netem";
  static constexpr const char* kNfqueue = "NFQUEUE";
  static constexpr const char* kPriomap = " bands 3 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0";

  NetLab() = default;

  void ProbeImpairment(int nodes) {
    const std::string probe =
        absl::StrCat("(tc qdisc add dev ", RootIf(0), " root handle 1: prio", kPriomap,
                     " && tc qdisc add dev ", RootIf(0), " parent 1:3 handle 30: netem delay 1ms)");
    const bool ok = Sh(probe);
    Sh(absl::StrCat("tc qdisc del dev ", RootIf(0), " root"));
    if (!ok) {
      if (absl::Status s = PacketImpairer::Probe(); !s.ok()) {
        impairment_ = absl::UnavailableError(absl::StrCat(
            "this kernel has no prio or netem qdisc ('Specified qdisc kind is unknown'; no "
            "modules to load), and NFQUEUE does not work either: ",
            s.message()));
        return;
      }
      impairer_ = kNfqueue;
      return;
    }
    impairer_ = kNetem;
    for (int i = 0; i < nodes && impairment_.ok(); ++i) {
      const std::string in_ns = absl::StrCat("ip netns exec ", Namespace(i), " ");
      for (const std::string& cmd :
           {absl::StrCat("tc qdisc add dev ", RootIf(i), " root handle 1: prio", kPriomap),
            absl::StrCat(in_ns, "tc qdisc add dev ", InnerIf(i), " root handle 1: prio",
                         kPriomap)}) {
        if (!Sh(cmd)) impairment_ = absl::UnavailableError(absl::StrCat("`", cmd, "` failed"));
      }
    }
    if (!impairment_.ok()) impairer_.clear();
  }
  std::string RootIf(int i) const { return absl::StrCat(prefix_, "r", i); }
  std::string InnerIf(int i) const { return absl::StrCat(prefix_, "v", i); }

  std::string prefix_;  // "mc<pid>"
  std::string net_;     // "10.79.<s>."
  std::string bridge_;  // empty until created
  std::vector<std::string> namespaces_;
  absl::Status impairment_;
  std::string impairer_;
  std::map<int, std::unique_ptr<PacketImpairer>> impairers_;  // node -> its NFQUEUE impairment
  uint64_t starts_ = 0;
  std::map<int, std::vector<std::string>> routes_;  // node -> commands that heal its partition
};

}  // namespace mooncake::chaos

#endif  // MOONCAKE_TOOLS_CHAOS_NETLAB_H_
