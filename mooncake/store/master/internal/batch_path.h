// The batched RPCs (BatchGetReplicas, BatchPutStart, BatchPutEnd): each item
// through its single-item path, answered at its position with its own status;
// included only by master.h.
//
// Tenant rule (master.proto): the batch's tenant applies to every item. An
// item naming none takes it (the item is copied to say so); an item naming
// another is PERMISSION_DENIED, so an authenticated tenant's batch, whose
// tenant the request guard fills or checks, cannot reach another tenant's
// objects through its items.
// IWYU pragma: private, include "mooncake/store/master/master.h"
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_BATCH_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_BATCH_PATH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master_internal {

namespace proto = ::mooncake::store::proto;

inline std::string* ItemTenant(proto::GetReplicasRequest& r) { return r.mutable_tenant(); }
inline std::string* ItemTenant(proto::PutStartRequest& r) {
  return r.mutable_options()->mutable_tenant();
}
inline std::string* ItemTenant(proto::PutEndRequest& r) { return r.mutable_tenant(); }
inline const std::string& ItemTenant(const proto::GetReplicasRequest& r) { return r.tenant(); }
inline const std::string& ItemTenant(const proto::PutStartRequest& r) {
  return r.options().tenant();
}
inline const std::string& ItemTenant(const proto::PutEndRequest& r) { return r.tenant(); }

// Runs `one(item)` for every item of `req` in order; `one` returns
// StatusOr<item response>.
template <typename BatchResp, typename BatchReq, typename One>
absl::StatusOr<BatchResp> ForEachItem(const BatchReq& req, std::string_view what, One&& one) {
  if (static_cast<size_t>(req.items_size()) > rpc::kMaxBatchItems) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(what), " of ", req.items_size(),
                                                   " items; at most ", rpc::kMaxBatchItems));
  }
  BatchResp out;
  out.mutable_items()->Reserve(req.items_size());
  out.mutable_status()->Reserve(req.items_size());
  for (const auto& item : req.items()) {
    auto* answer = out.add_items();
    proto::ItemStatus* st = out.add_status();
    const std::string& asked = ItemTenant(item);
    absl::StatusOr<std::decay_t<decltype(*answer)>> r;
    if (asked == req.tenant()) {
      r = one(item);
    } else if (asked.empty()) {
      auto copy = item;
      *ItemTenant(copy) = req.tenant();
      r = one(copy);
    } else {
      r = absl::PermissionDeniedError(absl::StrCat("an item of a ", AbslView(what), " of tenant '",
                                                   req.tenant(), "' names tenant '", asked, "'"));
    }
    if (r.ok()) {
      *answer = *std::move(r);
    } else {
      st->set_code(static_cast<int32_t>(r.status().code()));
      st->set_message(std::string(r.status().message()));
    }
  }
  return out;
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_BATCH_PATH_H_
