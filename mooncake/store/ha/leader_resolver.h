// LeaderResolver: where the leader of an HA master cluster is, for a
// TcpChannel that follows it (TcpChannelOptions::resolve):
//
//   ASSIGN_OR_RETURN(auto resolve, ha::LeaderResolver("http://127.0.0.1:2379", "prod"));
//   rpc::TcpChannelOptions o;
//   o.resolve = std::move(resolve);
//   ASSIGN_OR_RETURN(auto channel, rpc::TcpChannel::Connect("", o));
//
// Each call reads the leader key from etcd (one small request): the channel
// asks only before connecting and after an UNAVAILABLE answer. Errors:
// UNAVAILABLE when etcd is unreachable or no leader is elected (the channel
// then tries again until the call's deadline); INVALID_ARGUMENT at creation
// for bad endpoints or a bad cluster name.
//
// Thread-safety: the returned function may be called from any thread.
#ifndef MOONCAKE_STORE_HA_LEADER_RESOLVER_H_
#define MOONCAKE_STORE_HA_LEADER_RESOLVER_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/ha/election.h"
#include "mooncake/store/ha/etcd_client.h"
#include "mooncake/store/ha/keys.h"

namespace mooncake::ha {

inline absl::StatusOr<std::function<absl::StatusOr<std::string>()>> LeaderResolver(
    std::string_view endpoints, std::string cluster) {
  RETURN_IF_ERROR(ValidateClusterName(cluster));
  EtcdClientOptions eo;
  eo.timeout = absl::Milliseconds(500);  // a call's retries span the failover
  ASSIGN_OR_RETURN(EtcdClient etcd, EtcdClient::Create(endpoints, eo));
  return std::function<absl::StatusOr<std::string>()>(
      [etcd, cluster]() -> absl::StatusOr<std::string> {
        absl::StatusOr<std::optional<LeaderInfo>> l = ReadLeader(etcd, cluster);
        if (!l.ok()) {
          return absl::UnavailableError(absl::StrCat("looking up the leader of HA cluster '",
                                                     cluster, "': ", l.status().message()));
        }
        if (!l->has_value()) {
          return absl::UnavailableError(
              absl::StrCat("HA cluster '", cluster, "' has no leader at ", etcd.Describe(),
                           " (no master of it is running, or an election is under way)"));
        }
        return (*l)->id;
      });
}

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_LEADER_RESOLVER_H_
