// Router member definitions; included only by router.h.
// IWYU pragma: private, include "mooncake/transport/router.h"
#ifndef MOONCAKE_TRANSPORT_INTERNAL_ROUTER_IMPL_H_
#define MOONCAKE_TRANSPORT_INTERNAL_ROUTER_IMPL_H_

#ifndef MOONCAKE_TRANSPORT_ROUTER_H_
#error "include mooncake/transport/router.h instead"
#endif

namespace mooncake::transport {

inline absl::StatusOr<std::unique_ptr<Router>> Router::CreateFromList(
    RouterOptions options, std::vector<std::unique_ptr<transport_internal::AnyTransport>> list) {
  if (list.empty() || list.size() > transport_internal::kRouterTransportsMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Router: 1..", transport_internal::kRouterTransportsMax, " transports, got ", list.size()));
  }
  for (const auto& t : list) {
    if (t == nullptr) return absl::InvalidArgumentError("Router: null transport");
    const std::string ep = t->LocalEndpoint();
    if (ep.find('|') != std::string::npos || transport_internal::EndpointScheme(ep).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Router: transport endpoint '", ep, "' needs a scheme and no '|'"));
    }
  }
  if (options.slice_bytes == 0 || options.slices_in_flight_max == 0 ||
      options.batches_in_flight_max == 0 || options.attempt_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("RouterOptions: sizes, limits and timeout must be > 0");
  }
  qos::StrictPriorityScheduler<Slice>::Options q;
  q.limits.class_count = options.priority_classes;
  q.limits.capacity_items = options.queued_slices_max;
  RETURN_IF_ERROR(Queue::Validate(q));
  std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
    return transport_internal::TransportRank(a->Name()) <
           transport_internal::TransportRank(b->Name());
  });
  if (options.arbiter_retry <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("RouterOptions: arbiter_retry must be > 0");
  }
  std::vector<bool> arbitrated(list.size(), false);
  for (const RouteArbiter& ra : options.arbiters) {
    if (ra.arbiter == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("RouterOptions: null arbiter for transport '", ra.transport, "'"));
    }
    size_t t = 0;
    while (t < list.size() && list[t]->Name() != ra.transport) ++t;
    if (t == list.size()) {
      return absl::InvalidArgumentError(absl::StrCat("RouterOptions: arbiter for transport '",
                                                     ra.transport, "', which the router lacks"));
    }
    if (arbitrated[t]) {
      return absl::InvalidArgumentError(
          absl::StrCat("RouterOptions: two arbiters for transport '", ra.transport, "'"));
    }
    arbitrated[t] = true;
    // Router class k uses arbiter class min(k, arbiter classes - 1).
    const size_t used = std::min(options.priority_classes, ra.arbiter->priority_classes());
    for (size_t c = 0; c < used; ++c) {
      if (options.slice_bytes > ra.arbiter->max_grant_bytes(c)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "RouterOptions: slice_bytes ", options.slice_bytes, " exceeds the largest grant (",
            ra.arbiter->max_grant_bytes(c), " bytes of class ", c, ") of link '",
            ra.arbiter->link_name(), "': lower slice_bytes or raise the arbiter's burst_bytes"));
      }
    }
  }
  return std::unique_ptr<Router>(new Router(options, std::move(list), Queue(q)));
}

inline Router::Router(RouterOptions options,
                      std::vector<std::unique_ptr<transport_internal::AnyTransport>> list,
                      Queue queue)
    : options_(options),
      transports_(std::move(list)),
      metrics_(options.metrics, "router"),
      queue_(std::move(queue)),
      batches_(options.batches_in_flight_max, &metrics_) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  host_ = host;
  transport_internal::RouterEndpoint e{host_, ::getpid(), {}};
  for (const auto& t : transports_) {
    e.endpoints.push_back(t->LocalEndpoint());
    stats_.push_back(RouteStats{std::string(t->Name())});
    arbiter_of_.push_back(nullptr);
    for (const RouteArbiter& ra : options_.arbiters) {
      if (ra.transport == t->Name()) arbiter_of_.back() = ra.arbiter.get();
    }
  }
  held_.resize(transports_.size());
  for (auto& per_class : held_) per_class.resize(options_.priority_classes);
  endpoint_ = transport_internal::FormatRouterEndpoint(e);
  dispatcher_ = std::thread([this] { Loop(); });
}

inline Router::~Router() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    work_cv_.SignalAll();
  }
  dispatcher_.join();
  MutexLock lock(&mu_);
  // Nothing may touch callers' buffers once we are gone.
  for (SubBatch& sb : in_flight_) transports_[sb.transport]->Cancel(sb.id).IgnoreError();
  in_flight_.clear();
  for (auto& [id, d] : direct_) transports_[d.sub.transport]->Cancel(d.sub.id).IgnoreError();
  direct_.clear();
}

inline std::vector<Router::RouteStats> Router::route_stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

inline uint64_t Router::failovers() const {
  MutexLock lock(&mu_);
  return failovers_;
}

inline uint64_t Router::direct_batches() const {
  MutexLock lock(&mu_);
  return direct_batches_;
}

// --- Segments -------------------------------------------------------------------

inline absl::StatusOr<SegmentDesc> Router::RegisterMemory(void* addr, uint64_t length,
                                                          MemoryLocation location) {
  std::array<uint64_t, transport_internal::kRouterTransportsMax> sub{};
  absl::Status first_error;
  bool any = false;
  for (size_t i = 0; i < transports_.size(); ++i) {
    auto r = transports_[i]->RegisterMemory(addr, length, location);
    if (r.ok() && r->id > transport_internal::kRouterSubIdMax) {
      transports_[i]->UnregisterMemory(r->id).IgnoreError();
      r = absl::ResourceExhaustedError(
          absl::StrCat(AbslView(transports_[i]->Name()), " segment id ", r->id,
                       " exceeds the router's limit ", transport_internal::kRouterSubIdMax));
    }
    if (r.ok()) {
      sub[i] = r->id;
      any = true;
    } else if (first_error.ok()) {
      first_error = r.status();
    }
  }
  if (!any) return first_error;
  const SegmentId id = transport_internal::PackRouterId(sub);
  MutexLock lock(&mu_);
  segments_[id] = sub;
  return SegmentDesc{id, length, location};
}

inline absl::Status Router::UnregisterMemory(SegmentId id) {
  std::array<uint64_t, transport_internal::kRouterTransportsMax> sub;
  {
    MutexLock lock(&mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) {
      return absl::NotFoundError(absl::StrCat("UnregisterMemory: no segment ", id));
    }
    sub = it->second;
    segments_.erase(it);
  }
  absl::Status status;
  for (size_t i = 0; i < transports_.size(); ++i) {
    if (sub[i] != 0) status.Update(transports_[i]->UnregisterMemory(sub[i]));
  }
  return status;
}

inline absl::StatusOr<RemoteSegment> Router::OpenSegment(std::string_view endpoint, SegmentId id) {
  ASSIGN_OR_RETURN(const transport_internal::RouterEndpoint e,
                   transport_internal::ParseRouterEndpoint(endpoint));
  const auto sub = transport_internal::UnpackRouterId(id);
  if (!sub.has_value()) {
    return absl::NotFoundError(absl::StrCat("segment id ", id, " is not a router segment id"));
  }
  const bool same_host = e.host == host_;
  const bool same_process = same_host && e.pid == ::getpid();
  Opened o;
  std::vector<absl::Status> errors;
  for (size_t t = 0; t < transports_.size(); ++t) {
    auto& tr = *transports_[t];
    if (!transport_internal::TransportCanReach(tr.Name(), same_host, same_process)) continue;
    const std::string mine = tr.LocalEndpoint();
    for (size_t j = 0; j < e.endpoints.size(); ++j) {
      if (transport_internal::EndpointScheme(e.endpoints[j]) !=
              transport_internal::EndpointScheme(mine) ||
          (*sub)[j] == 0) {
        continue;
      }
      auto r = tr.OpenSegment(e.endpoints[j], (*sub)[j]);
      if (!r.ok()) {
        errors.push_back(r.status());
      } else if (!o.routes.empty() && r->length != o.length) {
        tr.CloseSegment(r->handle).IgnoreError();
        errors.push_back(absl::DataLossError("transports disagree on the segment's length"));
      } else {
        o.length = r->length;
        o.location = r->location;
        o.routes.push_back(Route{t, r->handle});
      }
      break;
    }
  }
  if (o.routes.empty()) {
    for (const absl::Status& s : errors) {
      if (!absl::IsNotFound(s)) {
        return absl::Status(s.code(),
                            absl::StrCat("no route to ", AbslView(endpoint), ": ", s.message()));
      }
    }
    return errors.empty() ? absl::NotFoundError(absl::StrCat(
                                "none of this router's transports reaches ", AbslView(endpoint)))
                          : errors.front();
  }
  MutexLock lock(&mu_);
  const SegmentHandle handle = next_handle_++;
  const RemoteSegment remote{handle, id, o.length, o.location};
  handles_[handle] = std::move(o);
  return remote;
}

inline void Router::CloseRoutes(Opened& o) {
  for (const Route& r : o.routes) transports_[r.transport]->CloseSegment(r.handle).IgnoreError();
  o.routes.clear();
}

inline absl::Status Router::CloseSegment(SegmentHandle handle) {
  MutexLock lock(&mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.closed) {
    return absl::NotFoundError(absl::StrCat("CloseSegment: unknown handle ", handle));
  }
  // Slices already submitted on it still run; the routes close after them.
  if (it->second.slices_alive > 0) {
    it->second.closed = true;
  } else {
    CloseRoutes(it->second);
    handles_.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace mooncake::transport

#include "mooncake/transport/internal/router_data.h"  // IWYU pragma: export

#endif  // MOONCAKE_TRANSPORT_INTERNAL_ROUTER_IMPL_H_
