// The extension module `mooncake._connector`: the PD connectors
// (mooncake/connector/) for Python engines. Argument conversion only; the
// Python module `mooncake.connector` wraps it (torch tensors, exceptions).
// Each connector owns its transport ("tcp" or "shm"). Calls that block
// (start_request, wait_*, end) release the GIL. Errors come back as
// (code, message) with absl status codes; 0 is OK.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mooncake/base/auth.h"
#include "mooncake/connector/decode_connector.h"
#include "mooncake/connector/kv_layout.h"
#include "mooncake/connector/prefill_connector.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/tcp_transport.h"

namespace py = pybind11;

namespace mooncake::connector {
namespace {

using Result = std::tuple<int, std::string>;

Result ToResult(const absl::Status& s) {
  return {static_cast<int>(s.code()), std::string(s.message())};
}

[[noreturn]] void Throw(const absl::Status& s) {
  if (absl::IsInvalidArgument(s)) throw py::value_error(std::string(s.message()));
  throw std::runtime_error(std::string(s.message()));
}

absl::StatusOr<KvOrder> ParseOrder(const std::string& name) {
  for (KvOrder o : {KvOrder::kLayerFirst, KvOrder::kLayerFirstHeadMajor,
                    KvOrder::kLayerFirstBlockMajor, KvOrder::kPageFirst}) {
    if (OrderName(o) == name) return o;
  }
  if (name == "vllm") return KvOrder::kLayerFirst;
  if (name == "sglang") return KvOrder::kPageFirst;
  return absl::InvalidArgumentError("order '" + name +
                                    "': want vllm, sglang, or a KvOrder name (layer_first, "
                                    "layer_first_head_major, layer_first_block_major, page_first)");
}

absl::StatusOr<KvDtype> ParseDtype(std::string name) {
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  const std::pair<const char*, KvDtype> names[] = {{"bfloat16", KvDtype::kBFloat16},
                                                   {"float16", KvDtype::kFloat16},
                                                   {"half", KvDtype::kFloat16},
                                                   {"float32", KvDtype::kFloat32},
                                                   {"float", KvDtype::kFloat32},
                                                   {"float8_e4m3fn", KvDtype::kFloat8E4M3},
                                                   {"float8_e5m2", KvDtype::kFloat8E5M2},
                                                   {"int8", KvDtype::kInt8},
                                                   {"uint8", KvDtype::kUint8}};
  for (const auto& [n, d] : names) {
    if (name == n) return d;
  }
  return absl::InvalidArgumentError("dtype '" + name + "' is not a KV dtype");
}

KvLayout MakeLayout(const std::string& order, const std::string& dtype, uint32_t num_layers,
                    uint32_t block_size, uint32_t num_kv_heads, uint32_t head_dim,
                    uint64_t num_blocks, uint32_t num_parts, uint32_t first_head,
                    uint32_t total_kv_heads) {
  absl::StatusOr<KvOrder> o = ParseOrder(order);
  if (!o.ok()) Throw(o.status());
  absl::StatusOr<KvDtype> d = ParseDtype(dtype);
  if (!d.ok()) Throw(d.status());
  KvLayout l{.order = *o,
             .dtype = *d,
             .num_layers = num_layers,
             .num_parts = num_parts,
             .block_size = block_size,
             .num_kv_heads = num_kv_heads,
             .head_dim = head_dim,
             .num_blocks = num_blocks,
             .first_head = first_head,
             .total_kv_heads = total_kv_heads == 0 ? num_kv_heads : total_kv_heads};
  if (absl::Status s = l.Validate(); !s.ok()) Throw(s);
  return l;
}

std::vector<std::byte*> Bases(const std::vector<uintptr_t>& addrs) {
  std::vector<std::byte*> v;
  for (uintptr_t a : addrs) {
    if (a == 0) throw py::value_error("a region base address is 0");
    v.push_back(reinterpret_cast<std::byte*>(a));
  }
  return v;
}

// MOONCAKE_AUTH_TOKEN_FILE (docs/security.md): the connector's RPC server
// and TCP transport serve only peers that prove a principal it lists, and
// prove this process's own; unset: no authentication.
std::shared_ptr<const auth::Credentials> AuthFromEnvironment() {
  absl::StatusOr<std::shared_ptr<const auth::Credentials>> c = auth::CredentialsFromEnvironment();
  if (!c.ok()) Throw(c.status());
  return *std::move(c);
}

// A connector (Conn = PrefillConnector or DecodeConnector) with the transport
// it owns, chosen by protocol name. `make(transport*, bool shm)` creates it.
template <template <typename> class Conn>
class PyConnector {
 public:
  template <typename Make>
  PyConnector(const std::string& protocol, const std::string& host,
              std::shared_ptr<const auth::Credentials> auth, Make&& make) {
    if (protocol == "tcp") {
      transport::TcpTransport::Options o;
      o.bind_host = host;
      o.auth = std::move(auth);
      tcp_transport_ = Value(transport::TcpTransport::Create(o));
      tcp_ = Value(make(tcp_transport_.get(), false));
    } else if (protocol == "shm") {
      transport::ShmTransport::Options o;
      o.auth = std::move(auth);
      shm_transport_ = Value(transport::ShmTransport::Create(std::move(o)));
      shm_ = Value(make(shm_transport_.get(), true));
    } else {
      throw py::value_error("protocol '" + protocol + "': want tcp or shm");
    }
  }
  template <typename F>
  auto With(F&& f) {
    return tcp_ ? f(*tcp_) : f(*shm_);
  }

 private:
  template <typename T>
  static T Value(absl::StatusOr<T> v) {
    if (!v.ok()) Throw(v.status());
    return std::move(*v);
  }

  // Declared before the connectors: destroyed after them.
  std::unique_ptr<transport::TcpTransport> tcp_transport_;
  std::unique_ptr<transport::ShmTransport> shm_transport_;
  std::unique_ptr<Conn<transport::TcpTransport>> tcp_;
  std::unique_ptr<Conn<transport::ShmTransport>> shm_;
};

using PyPrefill = PyConnector<PrefillConnector>;
using PyDecode = PyConnector<DecodeConnector>;

PyPrefill MakePrefill(const KvLayout& layout, const std::vector<uintptr_t>& bases,
                      const std::string& protocol, const std::string& rpc_host, uint16_t rpc_port,
                      double request_timeout_s) {
  PrefillConnectorOptions o;
  o.auth = AuthFromEnvironment();
  o.rpc_host = rpc_host;
  o.rpc_port = rpc_port;
  o.request_timeout_ms = static_cast<int64_t>(request_timeout_s * 1000);
  std::vector<const std::byte*> b;
  for (std::byte* p : Bases(bases)) b.push_back(p);
  return PyPrefill(protocol, rpc_host, o.auth, [&](auto* transport, bool /*shm*/) {
    using T = std::remove_pointer_t<decltype(transport)>;
    return PrefillConnector<T>::Create(transport, layout, b, o);
  });
}

PyDecode MakeDecode(const KvLayout& layout, const std::vector<uintptr_t>& bases,
                    const std::string& protocol, const std::string& rpc_host, uint16_t rpc_port,
                    uint32_t tp_rank, uint32_t tp_ranks) {
  DecodeConnectorOptions o;
  o.auth = AuthFromEnvironment();
  o.rpc_host = rpc_host;
  o.rpc_port = rpc_port;
  o.tp_rank = tp_rank;
  o.tp_ranks = tp_ranks;
  return PyDecode(protocol, rpc_host, o.auth, [&](auto* transport, bool shm) {
    using T = std::remove_pointer_t<decltype(transport)>;
    // SHM peers map the decode cache: it must be memfd memory (SharedBuffer).
    if (shm) o.location = transport::MemoryLocation::SharedMemory();
    return DecodeConnector<T>::Create(transport, layout, Bases(bases), o);
  });
}

// Memory an SHM decode cache must live in (memfd), exposed as a writable
// buffer (numpy.frombuffer / torch.frombuffer wrap it without a copy).
class PySharedBuffer {
 public:
  explicit PySharedBuffer(uint64_t nbytes) {
    auto m = transport::SharedMemory::Create(nbytes);
    if (!m.ok()) Throw(m.status());
    mem_ = std::make_unique<transport::SharedMemory>(std::move(*m));
  }
  uintptr_t address() const { return reinterpret_cast<uintptr_t>(mem_->data()); }
  uint64_t nbytes() const { return mem_->size(); }
  py::buffer_info Info() {
    return py::buffer_info(mem_->data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                           {static_cast<py::ssize_t>(mem_->size())}, {1});
  }

 private:
  std::unique_ptr<transport::SharedMemory> mem_;
};

py::dict PrefillStats(const PrefillConnectorStats& s) {
  py::dict d;
  d["requests_held"] = s.requests_held;
  d["blocks_held"] = s.blocks_held;
  d["pulls_waiting"] = s.pulls_waiting;
  d["requests_completed"] = s.requests_completed;
  d["requests_expired"] = s.requests_expired;
  d["requests_aborted"] = s.requests_aborted;
  d["layers_sent"] = s.layers_sent;
  d["ranges_sent"] = s.ranges_sent;
  d["bytes_sent"] = s.bytes_sent;
  return d;
}

py::dict DecodeStats(const DecodeConnectorStats& s) {
  py::dict d;
  d["requests_active"] = s.requests_active;
  d["requests_finished"] = s.requests_finished;
  d["requests_failed"] = s.requests_failed;
  d["cancels_unconfirmed"] = s.cancels_unconfirmed;
  return d;
}

}  // namespace
}  // namespace mooncake::connector

PYBIND11_MODULE(_connector, m) {
  using namespace mooncake::connector;  // NOLINT: the module's own namespace
  m.doc() = "PD connectors (mooncake/connector); use the mooncake.connector module.";
  const py::call_guard<py::gil_scoped_release> nogil;

  py::class_<KvLayout>(m, "KvLayout")
      .def(py::init(&MakeLayout), py::arg("order"), py::arg("dtype"), py::arg("num_layers"),
           py::arg("block_size"), py::arg("num_kv_heads"), py::arg("head_dim"),
           py::arg("num_blocks"), py::arg("num_parts") = 2, py::arg("first_head") = 0,
           py::arg("total_kv_heads") = 0)
      .def_property_readonly("order",
                             [](const KvLayout& l) { return std::string(OrderName(l.order)); })
      .def_property_readonly("dtype",
                             [](const KvLayout& l) { return std::string(DtypeName(l.dtype)); })
      .def_readonly("num_layers", &KvLayout::num_layers)
      .def_readonly("num_parts", &KvLayout::num_parts)
      .def_readonly("block_size", &KvLayout::block_size)
      .def_readonly("num_kv_heads", &KvLayout::num_kv_heads)
      .def_readonly("head_dim", &KvLayout::head_dim)
      .def_readonly("num_blocks", &KvLayout::num_blocks)
      .def_readonly("first_head", &KvLayout::first_head)
      .def_readonly("total_kv_heads", &KvLayout::total_kv_heads)
      .def_property_readonly("num_regions", &KvLayout::NumRegions)
      .def_property_readonly("region_bytes", &KvLayout::RegionBytes)
      .def_property_readonly("block_bytes", &KvLayout::BlockBytes)
      .def("__repr__", &KvLayout::DebugString);

  py::class_<PySharedBuffer>(m, "SharedBuffer", py::buffer_protocol())
      .def(py::init<uint64_t>(), py::arg("nbytes"))
      .def_property_readonly("address", &PySharedBuffer::address)
      .def_property_readonly("nbytes", &PySharedBuffer::nbytes)
      .def_buffer(&PySharedBuffer::Info);

  py::class_<PyPrefill>(m, "PrefillConnector")
      .def(py::init(&MakePrefill), py::arg("layout"), py::arg("bases"), py::arg("protocol") = "tcp",
           py::arg("rpc_host") = "127.0.0.1", py::arg("rpc_port") = 0,
           py::arg("request_timeout_s") = 120.0, nogil)
      .def_property_readonly(
          "rpc_address",
          [](PyPrefill& p) { return p.With([](auto& c) { return c.rpc_address(); }); })
      .def(
          "add_request",
          [](PyPrefill& p, const std::string& id, std::vector<uint64_t> blocks, uint64_t tokens) {
            return p.With(
                [&](auto& c) { return ToResult(c.AddRequest(id, std::move(blocks), tokens)); });
          },
          nogil)
      .def(
          "save_layer",
          [](PyPrefill& p, const std::string& id, uint32_t layer) {
            return p.With([&](auto& c) { return ToResult(c.SaveLayer(id, layer)); });
          },
          nogil)
      .def(
          "abort",
          [](PyPrefill& p, const std::string& id, const std::string& reason) {
            return p.With([&](auto& c) { return ToResult(c.Abort(id, reason)); });
          },
          nogil)
      .def(
          "take_released",
          [](PyPrefill& p) {
            std::vector<std::tuple<std::string, std::vector<uint64_t>, int, std::string>> out;
            for (ReleasedRequest& r : p.With([](auto& c) { return c.TakeReleased(); })) {
              out.emplace_back(r.request_id, std::move(r.blocks), static_cast<int>(r.status.code()),
                               std::string(r.status.message()));
            }
            return out;
          },
          nogil)
      .def("stats", [](PyPrefill& p) {
        const PrefillConnectorStats s = p.With([](auto& c) { return c.stats(); });
        return PrefillStats(s);
      });

  py::class_<PyDecode>(m, "DecodeConnector")
      .def(py::init(&MakeDecode), py::arg("layout"), py::arg("bases"), py::arg("protocol") = "tcp",
           py::arg("rpc_host") = "127.0.0.1", py::arg("rpc_port") = 0, py::arg("tp_rank") = 0,
           py::arg("tp_ranks") = 1, nogil)
      .def_property_readonly(
          "rpc_address",
          [](PyDecode& d) { return d.With([](auto& c) { return c.rpc_address(); }); })
      .def(
          "start_request",
          [](PyDecode& d, const std::string& id, const std::vector<std::string>& sources,
             std::vector<uint64_t> blocks, uint64_t tokens) {
            return d.With([&](auto& c) {
              return ToResult(c.StartRequest(id, sources, std::move(blocks), tokens));
            });
          },
          nogil)
      .def(
          "wait_layer",
          [](PyDecode& d, const std::string& id, uint32_t layer, double timeout_s) {
            return d.With([&](auto& c) {
              return ToResult(c.WaitLayer(id, layer, absl::Seconds(timeout_s)));
            });
          },
          nogil)
      .def(
          "wait_all",
          [](PyDecode& d, const std::string& id, double timeout_s) {
            return d.With(
                [&](auto& c) { return ToResult(c.WaitAll(id, absl::Seconds(timeout_s))); });
          },
          nogil)
      .def(
          "end",
          [](PyDecode& d, const std::string& id) {
            const EndResult e = d.With([&](auto& c) { return c.End(id); });
            const double after_s = absl::ToDoubleSeconds(e.reusable_after - absl::Now());
            return std::make_tuple(static_cast<int>(e.status.code()),
                                   std::string(e.status.message()), e.reusable_now,
                                   after_s > 0 ? after_s : 0.0);
          },
          nogil)
      .def("stats", [](PyDecode& d) {
        const DecodeConnectorStats s = d.With([](auto& c) { return c.stats(); });
        return DecodeStats(s);
      });
}
