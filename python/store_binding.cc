// The extension module `mooncake.store`: Mooncake Store's Python API
// (MooncakeDistributedStore, ReplicateConfig, SoftPinAction, BufferHandle;
// the tensor, clone, group and query calls are in store_objects_binding.cc)
// bound to mooncake::compat::DistributedStore. Only argument conversion
// lives here; every semantic is in mooncake/store/compat/ (docs/python.md).
// Every call that does I/O releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/store/compat/distributed_store.h"
#include "mooncake/store/compat/replicate_config.h"
#include "mooncake/store/compat/return_codes.h"
#include "mooncake/store/compat/store_config.h"
#include "python/store_objects_binding.h"

namespace py = pybind11;

namespace mooncake::compat {
namespace {

// A Python bytes-like value held for the length of a call (the GIL may be
// released while its bytes are read: the view keeps the object alive).
class ValueView {
 public:
  explicit ValueView(const py::handle& obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      throw py::type_error(
          "value must be a C-contiguous bytes-like object (bytes, bytearray, "
          "memoryview, numpy array)");
    }
    held_ = true;
  }
  ValueView(const ValueView&) = delete;
  ValueView(ValueView&& o) noexcept : view_(o.view_), held_(o.held_) { o.held_ = false; }
  ~ValueView() {
    if (held_) PyBuffer_Release(&view_);
  }
  std::string_view bytes() const {
    return {static_cast<const char*>(view_.buf), static_cast<size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

ReplicateConfig ConfigOr(const std::optional<ReplicateConfig>& c) {
  return c.has_value() ? *c : ReplicateConfig{};
}

std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

// A size given as an int or as text ("16MB").
uint64_t SizeArg(const char* name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v))
    throw py::type_error(std::string(name) + " must be an int or str");
  if (py::isinstance<py::int_>(v)) {
    const long long n = v.cast<long long>();
    if (n < 0) throw py::value_error(std::string(name) + " must not be negative");
    return static_cast<uint64_t>(n);
  }
  if (py::isinstance<py::str>(v)) {
    auto r = ParseSizeText(name, v.cast<std::string>());
    if (!r.ok()) throw py::value_error(std::string(r.status().message()));
    return *r;
  }
  throw py::type_error(std::string(name) + " must be an int or str");
}

// setup(config: dict): values as str or int; anything else is a TypeError.
ConfigMap DictArg(const py::dict& d) {
  ConfigMap out;
  for (auto [k, v] : d) {
    if (!py::isinstance<py::str>(k)) throw py::type_error("setup: config keys must be str");
    const std::string key = k.cast<std::string>();
    if (py::isinstance<py::bool_>(v))
      throw py::type_error("setup: '" + key + "' must be str or int");
    if (py::isinstance<py::int_>(v)) {
      const long long n = v.cast<long long>();
      if (n < 0) throw py::value_error("setup: '" + key + "' must not be negative");
      out[key] = std::to_string(n);
    } else if (py::isinstance<py::str>(v)) {
      out[key] = v.cast<std::string>();
    } else {
      throw py::type_error("setup: '" + key + "' must be str or int");
    }
  }
  return out;
}

// soft_pin_ttl_ms: None or an int in [0, 2^63]; anything else (negatives
// and larger values included) is a TypeError, as a wrong type is.
void SetPinTtl(ReplicateConfig& c, const py::object& v) {
  if (v.is_none()) {
    c.soft_pin_ttl_ms.reset();
    return;
  }
  if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v)) {
    throw py::type_error("soft_pin_ttl_ms must be None or an int");
  }
  if (v < py::int_(0) || v > (py::int_(1) << py::int_(63))) {
    throw py::type_error("soft_pin_ttl_ms must be in [0, 2^63]");
  }
  c.soft_pin_ttl_ms = v.cast<uint64_t>();
}

// Nested lists of get_into_ranges (buffer-major); a level whose lengths do
// not line up marks that entry, which then fails alone.
std::vector<BufferRanges> RangesArg(const std::vector<uintptr_t>& buffer_ptrs,
                                    const py::list& all_keys, const py::list& all_dst,
                                    const py::list& all_src, const py::list& all_sizes) {
  std::vector<BufferRanges> out(py::len(all_keys));
  auto as_list = [](const py::list& l, size_t i) -> std::optional<py::list> {
    if (i >= py::len(l) || !py::isinstance<py::list>(l[i])) return std::nullopt;
    return l[i].cast<py::list>();
  };
  for (size_t b = 0; b < out.size(); ++b) {
    BufferRanges& br = out[b];
    br.buffer = b < buffer_ptrs.size() ? buffer_ptrs[b] : 0;
    br.shape_ok = b < buffer_ptrs.size();
    std::optional<py::list> keys = as_list(all_keys, b);
    if (!keys.has_value()) throw py::type_error("all_keys must be a list of lists of str");
    std::optional<py::list> dst = as_list(all_dst, b), src = as_list(all_src, b),
                            sizes = as_list(all_sizes, b);
    br.shape_ok = br.shape_ok && dst.has_value() && src.has_value() && sizes.has_value() &&
                  py::len(*dst) == py::len(*keys) && py::len(*src) == py::len(*keys) &&
                  py::len(*sizes) == py::len(*keys);
    br.keys.resize(py::len(*keys));
    for (size_t k = 0; k < br.keys.size(); ++k) {
      KeyRanges& kr = br.keys[k];
      kr.key = (*keys)[k].cast<std::string>();
      std::optional<py::list> d = dst ? as_list(*dst, k) : std::nullopt;
      std::optional<py::list> s = src ? as_list(*src, k) : std::nullopt;
      std::optional<py::list> n = sizes ? as_list(*sizes, k) : std::nullopt;
      if (n.has_value()) kr.sizes = n->cast<std::vector<uint64_t>>();
      if (d.has_value()) kr.dst_offsets = d->cast<std::vector<uint64_t>>();
      if (s.has_value()) kr.src_offsets = s->cast<std::vector<uint64_t>>();
      kr.shape_ok = br.shape_ok && n.has_value() && kr.dst_offsets.size() == kr.sizes.size() &&
                    kr.src_offsets.size() == kr.sizes.size();
      if (!kr.shape_ok && kr.sizes.empty()) {
        kr.sizes.resize(std::max(kr.dst_offsets.size(), kr.src_offsets.size()));
      }
    }
  }
  return out;
}

}  // namespace
}  // namespace mooncake::compat

PYBIND11_MODULE(store, m) {
  using namespace mooncake::compat;
  m.doc() = "mooncake.store: Mooncake Store's Python API over the mooncake store (docs/python.md)";

  py::enum_<SoftPinAction>(m, "SoftPinAction")
      .value("PRESERVE", SoftPinAction::kPreserve)
      .value("ENABLE", SoftPinAction::kEnable)
      .value("DISABLE", SoftPinAction::kDisable);

  py::class_<ReplicateConfig>(m, "ReplicateConfig")
      .def(py::init([](uint32_t replica_num, SoftPinAction soft_pin_action,
                       const py::object& soft_pin_ttl_ms, bool with_hard_pin,
                       std::string preferred_segment, std::vector<std::string> preferred_segments,
                       bool prefer_alloc_in_same_node, std::vector<std::string> group_ids) {
             ReplicateConfig c;
             c.replica_num = replica_num;
             c.soft_pin_action = soft_pin_action;
             SetPinTtl(c, soft_pin_ttl_ms);
             c.with_hard_pin = with_hard_pin;
             c.preferred_segment = std::move(preferred_segment);
             c.preferred_segments = std::move(preferred_segments);
             c.prefer_alloc_in_same_node = prefer_alloc_in_same_node;
             c.group_ids = std::move(group_ids);
             return c;
           }),
           py::kw_only(), py::arg("replica_num") = 1,
           py::arg("soft_pin_action") = SoftPinAction::kPreserve,
           py::arg("soft_pin_ttl_ms") = py::none(), py::arg("with_hard_pin") = false,
           py::arg("preferred_segment") = "",
           py::arg("preferred_segments") = std::vector<std::string>{},
           py::arg("prefer_alloc_in_same_node") = false,
           py::arg("group_ids") = std::vector<std::string>{})
      .def_readwrite("replica_num", &ReplicateConfig::replica_num)
      .def_readwrite("soft_pin_action", &ReplicateConfig::soft_pin_action)
      .def_property(
          "soft_pin_ttl_ms",
          [](const ReplicateConfig& c) -> py::object {
            if (!c.soft_pin_ttl_ms.has_value()) return py::none();
            return py::int_(*c.soft_pin_ttl_ms);
          },
          &SetPinTtl)
      .def_readwrite("with_hard_pin", &ReplicateConfig::with_hard_pin)
      .def_readwrite("preferred_segment", &ReplicateConfig::preferred_segment)
      .def_readwrite("preferred_segments", &ReplicateConfig::preferred_segments)
      .def_readwrite("prefer_alloc_in_same_node", &ReplicateConfig::prefer_alloc_in_same_node)
      .def_readwrite("group_ids", &ReplicateConfig::group_ids)
      .def("__str__", &DescribeReplicateConfig)
      .def("__repr__", &DescribeReplicateConfig);

  py::class_<BufferHandle, std::shared_ptr<BufferHandle>>(m, "BufferHandle", py::buffer_protocol())
      .def("ptr", &BufferHandle::ptr)
      .def("size", &BufferHandle::size)
      .def("len", &BufferHandle::size)
      .def("__len__", &BufferHandle::size)
      .def_buffer([](BufferHandle& b) {
        return py::buffer_info(const_cast<char*>(b.data()), 1,
                               py::format_descriptor<uint8_t>::format(), 1, {b.size()}, {1},
                               /*readonly=*/true);
      });

  // Replica tasks, as Mooncake's store_py.cpp binds them (replica_task.h).
  py::enum_<TaskType>(m, "TaskType")
      .value("REPLICA_COPY", TaskType::kReplicaCopy)
      .value("REPLICA_MOVE", TaskType::kReplicaMove)
      .export_values();
  py::enum_<TaskStatus>(m, "TaskStatus")
      .value("PENDING", TaskStatus::kPending)
      .value("PROCESSING", TaskStatus::kProcessing)
      .value("SUCCESS", TaskStatus::kSuccess)
      .value("FAILED", TaskStatus::kFailed)
      .export_values();
  py::class_<TaskInfo>(m, "QueryTaskResponse", "Response structure for QueryTask operation.")
      .def(py::init<>())
      .def_readonly("id", &TaskInfo::id)
      .def_readonly("type", &TaskInfo::type)
      .def_readonly("status", &TaskInfo::status)
      .def_readonly("created_at_ms_epoch", &TaskInfo::created_at_ms_epoch)
      .def_readonly("last_updated_at_ms_epoch", &TaskInfo::last_updated_at_ms_epoch)
      .def_readonly("assigned_client", &TaskInfo::assigned_client)
      .def_readonly("message", &TaskInfo::message)
      .def("__repr__", [](const TaskInfo& t) {
        return "QueryTaskResponse(id=" + std::to_string(t.id.first) + "-" +
               std::to_string(t.id.second) + ", type=" + std::to_string(static_cast<int>(t.type)) +
               ", status=" + std::to_string(static_cast<int>(t.status)) +
               ", assigned_client=" + t.assigned_client + ")";
      });

  using Store = DistributedStore;
  const py::call_guard<py::gil_scoped_release> nogil;
  py::class_<Store> store(m, "MooncakeDistributedStore");
  store.def(py::init<>())
      .def(
          "setup",
          [](Store& s, const py::dict& config) {
            ConfigMap values;
            try {
              values = DictArg(config);
            } catch (const py::value_error&) {
              return kInvalidParams;
            }
            py::gil_scoped_release release;
            auto c = ResolveStoreConfig(values);
            if (!c.ok()) return kInvalidParams;
            return s.Setup(*c);
          },
          py::arg("config"))
      .def(
          "setup",
          [](Store& s, std::string local_hostname, std::string metadata_server,
             const py::object& global_segment_size, const py::object& local_buffer_size,
             std::string protocol, std::string rdma_devices, std::string master_server_addr) {
            StoreConfig c;
            c.local_hostname = std::move(local_hostname);
            c.metadata_server = std::move(metadata_server);
            try {
              c.global_segment_size = SizeArg("global_segment_size", global_segment_size);
              c.local_buffer_size = SizeArg("local_buffer_size", local_buffer_size);
            } catch (const py::value_error&) {
              return kInvalidParams;
            }
            c.protocol = std::move(protocol);
            c.rdma_devices = std::move(rdma_devices);
            c.master_server_addr = std::move(master_server_addr);
            py::gil_scoped_release release;
            return s.Setup(c);
          },
          py::arg("local_hostname"), py::arg("metadata_server"),
          py::arg("global_segment_size") = py::int_(16 << 20),
          py::arg("local_buffer_size") = py::int_(16 << 20), py::arg("protocol") = "tcp",
          py::arg("rdma_devices") = "", py::arg("master_server_addr") = "127.0.0.1:50051")
      .def("setup",
           [](Store& s) {
             py::gil_scoped_release release;
             auto c = ResolveStoreConfig({});
             if (!c.ok()) return kInvalidParams;
             return s.Setup(*c);
           })
      .def("setup_dummy", &Store::SetupDummy, py::arg("mem_pool_size"),
           py::arg("local_buffer_size"), py::arg("server_address"), nogil)
      .def("close", &Store::Close, nogil)
      .def("health_check", &Store::HealthCheck, nogil)
      .def("get_hostname", &Store::GetHostname)
      .def("last_error", &Store::last_error)
      // ---- writes
      .def(
          "put",
          [](Store& s, const std::string& key, const py::handle& value,
             const std::optional<ReplicateConfig>& config) {
            ValueView v(value);
            py::gil_scoped_release release;
            return s.Put(key, v.bytes(), ConfigOr(config));
          },
          py::arg("key"), py::arg("value"), py::arg("config") = py::none())
      .def(
          "upsert",
          [](Store& s, const std::string& key, const py::handle& value,
             const std::optional<ReplicateConfig>& config) {
            ValueView v(value);
            py::gil_scoped_release release;
            return s.Upsert(key, v.bytes(), ConfigOr(config));
          },
          py::arg("key"), py::arg("value"), py::arg("config") = py::none())
      .def(
          "put_parts",
          [](Store& s, const std::string& key, const py::args& parts,
             const std::optional<ReplicateConfig>& config) {
            std::vector<ValueView> views;
            views.reserve(parts.size());
            for (const py::handle& p : parts) views.emplace_back(p);
            std::vector<std::string_view> bytes;
            for (const ValueView& v : views) bytes.push_back(v.bytes());
            py::gil_scoped_release release;
            return s.PutParts(key, bytes, ConfigOr(config));
          },
          py::arg("key"), py::arg("config") = py::none())
      .def(
          "put_batch",
          [](Store& s, const std::vector<std::string>& keys, const py::list& values,
             const std::optional<ReplicateConfig>& config) {
            std::vector<ValueView> views;
            views.reserve(py::len(values));
            for (const py::handle& v : values) views.emplace_back(v);
            std::vector<std::string_view> bytes;
            for (const ValueView& v : views) bytes.push_back(v.bytes());
            const std::vector<std::string_view> k = Views(keys);
            py::gil_scoped_release release;
            return s.PutBatch(k, bytes, ConfigOr(config));
          },
          py::arg("keys"), py::arg("values"), py::arg("config") = py::none())
      .def(
          "put_from",
          [](Store& s, const std::string& key, uintptr_t buffer_ptr, uint64_t size,
             const std::optional<ReplicateConfig>& config) {
            py::gil_scoped_release release;
            return s.PutFrom(key, buffer_ptr, size, ConfigOr(config));
          },
          py::arg("key"), py::arg("buffer_ptr"), py::arg("size"), py::arg("config") = py::none())
      .def(
          "upsert_from",
          [](Store& s, const std::string& key, uintptr_t buffer_ptr, uint64_t size,
             const std::optional<ReplicateConfig>& config) {
            py::gil_scoped_release release;
            return s.PutFrom(key, buffer_ptr, size, ConfigOr(config), /*upsert=*/true);
          },
          py::arg("key"), py::arg("buffer_ptr"), py::arg("size"), py::arg("config") = py::none())
      .def(
          "batch_put_from",
          [](Store& s, const std::vector<std::string>& keys,
             const std::vector<uintptr_t>& buffer_ptrs, const std::vector<uint64_t>& sizes,
             const std::optional<ReplicateConfig>& config) {
            const std::vector<std::string_view> k = Views(keys);
            py::gil_scoped_release release;
            return s.BatchPutFrom(k, buffer_ptrs, sizes, ConfigOr(config));
          },
          py::arg("keys"), py::arg("buffer_ptrs"), py::arg("sizes"), py::arg("config") = py::none())
      .def(
          "batch_upsert_from",
          [](Store& s, const std::vector<std::string>& keys,
             const std::vector<uintptr_t>& buffer_ptrs, const std::vector<uint64_t>& sizes,
             const std::optional<ReplicateConfig>& config) {
            const std::vector<std::string_view> k = Views(keys);
            py::gil_scoped_release release;
            return s.BatchPutFrom(k, buffer_ptrs, sizes, ConfigOr(config), /*upsert=*/true);
          },
          py::arg("keys"), py::arg("buffer_ptrs"), py::arg("sizes"), py::arg("config") = py::none())
      // ---- reads
      .def(
          "get",
          [](Store& s, const std::string& key) {
            std::optional<std::string> v;
            {
              py::gil_scoped_release release;
              v = s.Get(key);
            }
            return v.has_value() ? py::bytes(*v) : py::bytes("", 0);
          },
          py::arg("key"))
      .def(
          "get_batch",
          [](Store& s, const std::vector<std::string>& keys) {
            std::vector<std::optional<std::string>> v;
            {
              const std::vector<std::string_view> k = Views(keys);
              py::gil_scoped_release release;
              v = s.GetBatch(k);
            }
            py::list out;
            for (auto& x : v) out.append(x.has_value() ? py::bytes(*x) : py::bytes("", 0));
            return out;
          },
          py::arg("keys"))
      .def(
          "get_buffer",
          [](Store& s, const std::string& key) -> std::shared_ptr<BufferHandle> {
            std::optional<std::string> v;
            {
              py::gil_scoped_release release;
              v = s.Get(key);
            }
            if (!v.has_value()) return nullptr;
            return std::make_shared<BufferHandle>(std::move(*v));
          },
          py::arg("key"))
      .def(
          "batch_get_buffer",
          [](Store& s, const std::vector<std::string>& keys) {
            std::vector<std::optional<std::string>> v;
            {
              const std::vector<std::string_view> k = Views(keys);
              py::gil_scoped_release release;
              v = s.GetBatch(k);
            }
            std::vector<std::shared_ptr<BufferHandle>> out;
            for (auto& x : v) {
              out.push_back(x.has_value() ? std::make_shared<BufferHandle>(std::move(*x))
                                          : nullptr);
            }
            return out;
          },
          py::arg("keys"))
      .def("get_into", &Store::GetInto, py::arg("key"), py::arg("buffer_ptr"), py::arg("size"),
           nogil)
      .def(
          "batch_get_into",
          [](Store& s, const std::vector<std::string>& keys,
             const std::vector<uintptr_t>& buffer_ptrs, const std::vector<uint64_t>& sizes) {
            const std::vector<std::string_view> k = Views(keys);
            py::gil_scoped_release release;
            return s.BatchGetInto(k, buffer_ptrs, sizes);
          },
          py::arg("keys"), py::arg("buffer_ptrs"), py::arg("sizes"))
      .def(
          "get_into_ranges",
          [](Store& s, const std::vector<uintptr_t>& buffer_ptrs, const py::list& all_keys,
             const py::list& all_dst_offsets, const py::list& all_src_offsets,
             const py::list& all_sizes) {
            std::vector<BufferRanges> ranges;
            try {
              ranges =
                  RangesArg(buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes);
            } catch (const py::cast_error& e) {
              throw py::type_error(std::string("get_into_ranges: ") + e.what());
            }
            py::gil_scoped_release release;
            return s.GetIntoRanges(ranges);
          },
          py::arg("buffer_ptrs"), py::arg("all_keys"), py::arg("all_dst_offsets"),
          py::arg("all_src_offsets"), py::arg("all_sizes"))
      // ---- registered memory
      .def("register_buffer", &Store::RegisterBuffer, py::arg("buffer_ptr"), py::arg("size"), nogil)
      .def("unregister_buffer", &Store::UnregisterBuffer, py::arg("buffer_ptr"), nogil)
      // ---- queries and removal
      .def("is_exist", &Store::IsExist, py::arg("key"), nogil)
      .def(
          "batch_is_exist",
          [](Store& s, const std::vector<std::string>& keys) {
            const std::vector<std::string_view> k = Views(keys);
            py::gil_scoped_release release;
            return s.BatchIsExist(k);
          },
          py::arg("keys"))
      .def("get_size", &Store::GetSize, py::arg("key"), nogil)
      .def("remove", &Store::Remove, py::arg("key"), py::arg("force") = false, nogil)
      .def(
          "batch_remove",
          [](Store& s, const std::vector<std::string>& keys, bool force) {
            const std::vector<std::string_view> k = Views(keys);
            py::gil_scoped_release release;
            return s.BatchRemove(k, force);
          },
          py::arg("keys"), py::arg("force") = false)
      .def("remove_by_regex", &Store::RemoveByRegex, py::arg("regex_pattern"), nogil)
      .def("remove_all", &Store::RemoveAll, nogil)
      // ---- replica tasks: (UUID, code) and (QueryTaskResponse | None, code)
      .def("create_copy_task", &Store::CreateCopyTask, py::arg("key"), py::arg("targets"), nogil,
           "Copy an object to target segments. Returns (task UUID, 0) or ((0, 0), error code).")
      .def("create_move_task", &Store::CreateMoveTask, py::arg("key"), py::arg("source"),
           py::arg("target"), nogil,
           "Move an object from source segment to target segment. Returns (task UUID, 0) or "
           "((0, 0), error code).")
      .def("query_task", &Store::QueryTask, py::arg("task_id"), nogil,
           "Query the status of a task. Returns (QueryTaskResponse, 0) or (None, error code).");
  BindObjectCalls(m, store);
}
