// The extension module `mooncake.engine`: Mooncake Transfer Engine's Python
// API (TransferEngine, TransferOpcode) bound to
// mooncake::transport::compat::TransferEngine. Only argument conversion lives
// here; every semantic is in mooncake/transport/compat/ (docs/python.md).
// Every call that may block (network, locks, copies of any size) releases
// the GIL; arguments are converted before it is released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/transport/compat/return_codes.h"
#include "mooncake/transport/compat/transfer_engine.h"

namespace py = pybind11;

namespace mooncake::transport::compat {
namespace {

using Addrs = std::vector<uintptr_t>;
using Lengths = std::vector<size_t>;

// A Python bytes-like value held while its bytes are read without the GIL.
class BytesView {
 public:
  explicit BytesView(const py::handle& obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      throw py::type_error(
          "data must be a C-contiguous bytes-like object (bytes, bytearray, memoryview, numpy "
          "array)");
    }
  }
  BytesView(const BytesView&) = delete;
  BytesView& operator=(const BytesView&) = delete;
  ~BytesView() { PyBuffer_Release(&view_); }
  std::string_view bytes() const {
    return {static_cast<const char*>(view_.buf), static_cast<size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

// Mooncake's notify argument: notifications are not part of this engine.
bool RefuseNotify(const py::object& notify) {
  if (notify.is_none()) return false;
  PySys_WriteStderr("mooncake.engine: transfer notifications are not supported\n");
  return true;
}

}  // namespace
}  // namespace mooncake::transport::compat

PYBIND11_MODULE(engine, m) {
  using namespace mooncake::transport::compat;
  using Engine = TransferEngine;
  m.doc() = "mooncake.engine: Mooncake Transfer Engine's Python API over TCP (docs/python.md)";
  m.attr("SUPPORT_CUDA") = false;
  m.attr("SUPPORT_EFA") = false;
  m.attr("SUPPORT_HIP") = false;
  m.attr("SUPPORT_MNNVL") = false;
  m.attr("SUPPORT_INTRA_NVLINK") = false;

  py::enum_<TransferOpcode> opcode(m, "TransferOpcode", py::arithmetic());
  opcode.value("Read", TransferOpcode::kRead)
      .value("Write", TransferOpcode::kWrite)
      .value("READ", TransferOpcode::kRead)
      .value("WRITE", TransferOpcode::kWrite)
      .export_values();

  const py::call_guard<py::gil_scoped_release> nogil;
  const auto hint = py::arg("transport_hint") = "";
  py::class_<Engine> cls(m, "TransferEngine");
  cls.def(py::init<>())
      .def(
          "initialize",
          [](Engine& e, const std::string& local_hostname, const std::string& metadata_server,
             const std::string& protocol, const std::string& device_name) {
            return e.Initialize(local_hostname, metadata_server, protocol, device_name);
          },
          py::arg("local_hostname"), py::arg("metadata_server"), py::arg("protocol"),
          py::arg("device_name"), nogil)
      .def(
          "initialize_ext",
          [](Engine& e, const std::string& local_hostname, const std::string& metadata_server,
             const std::string& protocol, const std::string& device_name,
             const std::string& metadata_type) {
            return e.InitializeExt(local_hostname, metadata_server, protocol, device_name,
                                   metadata_type);
          },
          py::arg("local_hostname"), py::arg("metadata_server"), py::arg("protocol"),
          py::arg("device_name"), py::arg("metadata_type"), nogil)
      .def("get_rpc_port", &Engine::GetRpcPort)
      .def("allocate_managed_buffer", &Engine::AllocateManagedBuffer, py::arg("length"), nogil)
      .def("free_managed_buffer", &Engine::FreeManagedBuffer, py::arg("buffer_addr"),
           py::arg("length"), nogil)
      .def(
          "register_memory",
          [](Engine& e, uintptr_t addr, size_t capacity, const std::string& location) {
            return e.RegisterMemory(addr, capacity, location);
          },
          py::arg("buffer_addr"), py::arg("capacity"), py::arg("location") = "*", nogil)
      .def("unregister_memory", &Engine::UnregisterMemory, py::arg("buffer_addr"), nogil)
      .def(
          "batch_register_memory",
          [](Engine& e, const Addrs& addrs, const Lengths& capacities,
             const std::string& location) {
            return e.BatchRegisterMemory(addrs, capacities, location);
          },
          py::arg("buffer_addresses"), py::arg("capacities"), py::arg("location") = "*", nogil)
      .def(
          "batch_unregister_memory",
          [](Engine& e, const Addrs& addrs) { return e.BatchUnregisterMemory(addrs); },
          py::arg("buffer_addresses"), nogil)
      .def(
          "get_first_buffer_address",
          [](Engine& e, const std::string& segment_name) {
            return e.GetFirstBufferAddress(segment_name);
          },
          py::arg("segment_name"), nogil)
      .def(
          "transfer_sync_write",
          [](Engine& e, const std::string& target, uintptr_t buffer, uintptr_t peer, size_t length,
             const std::string&) {
            return e.TransferSync(target, buffer, peer, length, TransferOpcode::kWrite);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"),
          py::arg("length"), hint, nogil)
      .def(
          "transfer_sync_read",
          [](Engine& e, const std::string& target, uintptr_t buffer, uintptr_t peer, size_t length,
             const std::string&) {
            return e.TransferSync(target, buffer, peer, length, TransferOpcode::kRead);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"),
          py::arg("length"), hint, nogil)
      .def(
          "transfer_sync",
          [](Engine& e, const std::string& target, uintptr_t buffer, uintptr_t peer, size_t length,
             TransferOpcode op, const py::object& notify, const std::string&) {
            {
              py::gil_scoped_acquire gil;  // notify is a Python object
              if (RefuseNotify(notify)) return kFailed;
            }
            return e.TransferSync(target, buffer, peer, length, op);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"),
          py::arg("length"), py::arg("opcode"), py::arg("notify") = py::none(), hint, nogil)
      .def(
          "batch_transfer_sync_write",
          [](Engine& e, const std::string& target, const Addrs& buffers, const Addrs& peers,
             const Lengths& lengths, const std::string&) {
            return e.BatchTransferSync(target, buffers, peers, lengths, TransferOpcode::kWrite);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"),
          py::arg("lengths"), hint, nogil)
      .def(
          "batch_transfer_sync_read",
          [](Engine& e, const std::string& target, const Addrs& buffers, const Addrs& peers,
             const Lengths& lengths, const std::string&) {
            return e.BatchTransferSync(target, buffers, peers, lengths, TransferOpcode::kRead);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"),
          py::arg("lengths"), hint, nogil)
      .def(
          "batch_transfer_sync",
          [](Engine& e, const std::string& target, const Addrs& buffers, const Addrs& peers,
             const Lengths& lengths, TransferOpcode op, const py::object& notify,
             const std::string&) {
            {
              py::gil_scoped_acquire gil;
              if (RefuseNotify(notify)) return kFailed;
            }
            return e.BatchTransferSync(target, buffers, peers, lengths, op);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"),
          py::arg("lengths"), py::arg("opcode"), py::arg("notify") = py::none(), hint, nogil)
      .def(
          "batch_transfer_async_write",
          [](Engine& e, const std::string& target, const Addrs& buffers, const Addrs& peers,
             const Lengths& lengths, const std::string&) {
            return e.BatchTransferAsync(target, buffers, peers, lengths, TransferOpcode::kWrite);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"),
          py::arg("lengths"), hint, nogil)
      .def(
          "batch_transfer_async_read",
          [](Engine& e, const std::string& target, const Addrs& buffers, const Addrs& peers,
             const Lengths& lengths, const std::string&) {
            return e.BatchTransferAsync(target, buffers, peers, lengths, TransferOpcode::kRead);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"),
          py::arg("lengths"), hint, nogil)
      .def(
          "batch_transfer_async",
          [](Engine& e, const std::string& target, const Addrs& buffers, const Addrs& peers,
             const Lengths& lengths, TransferOpcode op, const std::string&) {
            return e.BatchTransferAsync(target, buffers, peers, lengths, op);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"),
          py::arg("lengths"), py::arg("opcode"), hint, nogil)
      .def(
          "get_batch_transfer_status",
          [](Engine& e, const std::vector<uint64_t>& ids) { return e.GetBatchTransferStatus(ids); },
          py::arg("batch_ids"), nogil)
      .def(
          "transfer_submit_write",
          [](Engine& e, const std::string& target, uintptr_t buffer, uintptr_t peer, size_t length,
             const std::string&) { return e.TransferSubmitWrite(target, buffer, peer, length); },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"),
          py::arg("length"), hint, nogil)
      .def("transfer_check_status", &Engine::TransferCheckStatus, py::arg("batch_id"), nogil)
      .def(
          "send_probe", [](Engine& e, const std::string& peer) { return e.SendProbe(peer); },
          py::arg("peer_server_name"), nogil)
      .def(
          "write_bytes_to_buffer",
          [](Engine&, uintptr_t dest, const py::object& data, size_t length) {
            BytesView view(data);
            py::gil_scoped_release release;
            return Engine::WriteBytesToBuffer(dest, view.bytes(), length);
          },
          py::arg("dest_address"), py::arg("src_ptr"), py::arg("length"))
      .def(
          "read_bytes_from_buffer",
          [](Engine&, uintptr_t src, size_t length) {
            // Fill a fresh bytes object in place: one copy, without the GIL.
            py::bytes out(nullptr, 0);
            PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(length));
            if (raw == nullptr) throw py::error_already_set();
            out = py::reinterpret_steal<py::bytes>(raw);
            char* dst = PyBytes_AsString(raw);
            int rc = 0;
            {
              py::gil_scoped_release release;
              rc = Engine::ReadBytesFromBuffer(src, length, dst);
            }
            if (rc != kOk) throw py::value_error("read_bytes_from_buffer: null source address");
            return out;
          },
          py::arg("source_address"), py::arg("length"))
      .def(
          "get_local_topology",
          // No RDMA devices are discovered by this build: an empty topology.
          [](Engine&, const py::object&) { return std::string("{}"); },
          py::arg("device_name") = py::none());
  cls.attr("TransferOpcode") = opcode;
}
