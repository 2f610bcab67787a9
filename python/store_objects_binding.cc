// MooncakeDistributedStore's tensor calls (Mooncake's put_tensor /
// get_tensor family, with its names, argument order, defaults and returns),
// and the clone, object-group and query calls (docs/python.md).
//
// Tensors: a CPU, contiguous torch tensor of a dtype in
// compat::kTensorDTypes is stored as its raw bytes with a TensorMeta (dtype,
// shape; tp_rank and tp_size for a TP shard), from which a get rebuilds it.
// What cannot be stored or rebuilt (not a tensor, another dtype, a CUDA or
// non-contiguous tensor, an object without TensorMeta, an fp8 dtype this torch
// lacks, torch not importable) is Mooncake's answer (kInvalidParams on a put,
// None on a get) plus a RuntimeWarning naming the reason: a bad input never
// raises out of these calls and never crashes.
#include "python/store_objects_binding.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mooncake/store/compat/replicate_config.h"
#include "mooncake/store/compat/return_codes.h"
#include "mooncake/store/compat/tensor_meta.h"

namespace py = pybind11;

namespace mooncake::compat {
namespace {

namespace proto = store::proto;

// A RuntimeWarning (an exception only where warnings are made errors).
void Warn(const std::string& message) {
  if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) != 0) {
    throw py::error_already_set();
  }
}

std::optional<py::module_> Torch(std::string_view call) {
  try {
    return py::module_::import("torch");
  } catch (const py::error_already_set& e) {
    Warn(std::string(call) + ": torch is not importable (" + e.what() + ")");
    return std::nullopt;
  }
}

// One tensor's bytes, held alive by `owner` while the GIL is released.
struct HeldTensor {
  py::object owner;
  std::string_view bytes;
  proto::TensorMeta meta;
};

// What a caller may add to a tensor's TensorMeta beyond dtype, shape and TP
// (not in Mooncake's API: keyword-only arguments, empty by default), so that
// query_objects can find it by model and layers.
struct TensorLabels {
  std::string model;
  uint32_t layer_begin = 0;
  uint32_t layer_end = 0;
  uint32_t block_tokens = 0;

  void ApplyTo(proto::TensorMeta& meta) const {
    if (!model.empty()) meta.set_model(model);
    meta.set_layer_begin(layer_begin);
    meta.set_layer_end(layer_end);
    meta.set_block_tokens(block_tokens);
  }
};

// The bytes and TensorMeta of `obj`, or nullopt after a warning naming why
// it cannot be stored. Needs the GIL.
std::optional<HeldTensor> HoldTensor(const py::handle& obj, const std::string& key,
                                     std::string_view call) {
  const std::string where = std::string(call) + " '" + key + "': ";
  std::optional<py::module_> torch = Torch(call);
  if (!torch.has_value()) return std::nullopt;
  try {
    if (!py::isinstance(obj, torch->attr("Tensor"))) {
      Warn(where + "the value is not a torch.Tensor");
      return std::nullopt;
    }
    if (!obj.attr("layout").is(torch->attr("strided"))) {
      Warn(where + "only dense (strided) tensors are stored");
      return std::nullopt;
    }
    const std::string device = py::str(obj.attr("device").attr("type"));
    if (device != "cpu") {
      Warn(where + "the tensor is on device '" + device +
           "'; only CPU tensors are stored (move it with .cpu())");
      return std::nullopt;
    }
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      Warn(where + "the tensor is not contiguous (store t.contiguous())");
      return std::nullopt;
    }
    std::string dtype = py::str(obj.attr("dtype"));
    if (dtype.rfind("torch.", 0) == 0) dtype.erase(0, 6);
    std::vector<int64_t> shape;
    for (const py::handle d : obj.attr("shape")) shape.push_back(d.cast<int64_t>());
    const uint64_t nbytes =
        obj.attr("numel")().cast<uint64_t>() * obj.attr("element_size")().cast<uint64_t>();
    if (nbytes == 0) {
      Warn(where + "the tensor has no elements (an empty value is not stored)");
      return std::nullopt;
    }
    auto meta = MakeTensorMeta(dtype, shape, nbytes);
    if (!meta.ok()) {
      Warn(where + std::string(meta.status().message()));
      return std::nullopt;
    }
    const auto ptr = obj.attr("data_ptr")().cast<uintptr_t>();
    return HeldTensor{py::reinterpret_borrow<py::object>(obj),
                      std::string_view(reinterpret_cast<const char*>(ptr), nbytes),
                      std::move(*meta)};
  } catch (const py::error_already_set& e) {
    Warn(where + e.what());
    return std::nullopt;
  }
}

// A tensor rebuilt from a stored object, or None after a warning. Needs the GIL.
py::object ToTensor(const client::StoredObject& o, const std::string& key, std::string_view call) {
  const std::string where = std::string(call) + " '" + key + "': ";
  if (!o.tensor.has_value()) {
    Warn(where + "the object was not stored as a tensor (it has no TensorMeta)");
    return py::none();
  }
  auto d = CheckStoredTensor(*o.tensor, o.value.size());
  if (!d.ok()) {
    Warn(where + std::string(d.status().message()));
    return py::none();
  }
  std::optional<py::module_> torch = Torch(call);
  if (!torch.has_value()) return py::none();
  const std::string name(d->torch_name);
  if (!py::hasattr(*torch, name.c_str())) {
    Warn(where + "the tensor's dtype " + name + " does not exist in this torch (" +
         py::str(torch->attr("__version__")).cast<std::string>() + ")");
    return py::none();
  }
  try {
    py::tuple shape(o.tensor->shape_size());
    for (int i = 0; i < o.tensor->shape_size(); ++i) shape[i] = py::int_(o.tensor->shape(i));
    py::object t = torch->attr("empty")(shape, py::arg("dtype") = torch->attr(name.c_str()));
    std::memcpy(reinterpret_cast<void*>(t.attr("data_ptr")().cast<uintptr_t>()), o.value.data(),
                o.value.size());
    return t;
  } catch (const py::error_already_set& e) {
    Warn(where + e.what());
    return py::none();
  }
}

// Mooncake's check of a pub_* config: preferred_segments, when given, name
// one segment per replica.
bool PubConfigOk(const ReplicateConfig& c) {
  if (c.preferred_segments.empty() || c.preferred_segments.size() == c.replica_num) return true;
  Warn("pub_tensor: preferred_segments must name replica_num segments");
  return false;
}

// Stores held[i] under keys[i]; one code per key. GIL released inside.
std::vector<int> PutHeld(DistributedStore& s, const std::vector<std::string>& keys,
                         const std::vector<HeldTensor>& held, const ReplicateConfig& config) {
  std::vector<std::string_view> k(keys.begin(), keys.end()), v;
  std::vector<proto::TensorMeta> metas;
  for (const HeldTensor& h : held) {
    v.push_back(h.bytes);
    metas.push_back(h.meta);
  }
  py::gil_scoped_release release;
  return s.BatchPutTensor(k, v, metas, config);
}

// put_tensor / batch_put_tensor (and pub_*): one code per key.
std::vector<int> PutTensors(DistributedStore& s, const std::vector<std::string>& keys,
                            const py::list& tensors, const ReplicateConfig& config,
                            std::string_view call, const TensorLabels& labels = {}) {
  if (keys.size() != py::len(tensors)) {
    Warn(std::string(call) + ": keys and tensors differ in length");
    return std::vector<int>(keys.size(), kInvalidParams);
  }
  std::vector<int> codes(keys.size(), kOk);
  std::vector<std::string> put_keys;
  std::vector<HeldTensor> held;
  std::vector<size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<HeldTensor> h = HoldTensor(tensors[i], keys[i], call);
    if (!h.has_value()) {
      codes[i] = kInvalidParams;
      continue;
    }
    labels.ApplyTo(h->meta);
    put_keys.push_back(keys[i]);
    held.push_back(std::move(*h));
    index.push_back(i);
  }
  if (held.empty()) return codes;
  // group_ids index the caller's keys: keep only the stored ones' ids.
  ReplicateConfig c = config;
  if (c.group_ids.size() == keys.size() && keys.size() > 1) {
    c.group_ids.clear();
    for (size_t i : index) c.group_ids.push_back(config.group_ids[i]);
  }
  const std::vector<int> r = PutHeld(s, put_keys, held, c);
  for (size_t j = 0; j < index.size(); ++j) codes[index[j]] = r[j];
  return codes;
}

// The _with_tp puts: torch.chunk(t, tp_size, split_dim)[r], made contiguous,
// under TpShardKey(key, r) with tp_rank r and tp_size in its TensorMeta; one
// code per base key (its first failing shard's).
std::vector<int> PutTensorsTp(DistributedStore& s, const std::vector<std::string>& base_keys,
                              const py::list& tensors, const ReplicateConfig& config, int tp_size,
                              int split_dim, std::string_view call,
                              const TensorLabels& labels = {}) {
  if (base_keys.size() != py::len(tensors)) {
    Warn(std::string(call) + ": keys and tensors differ in length");
    return std::vector<int>(base_keys.size(), kInvalidParams);
  }
  if (config.group_ids.size() > 1 && config.group_ids.size() != base_keys.size()) {
    Warn(std::string(call) + ": group_ids needs one id, or one per key");
    return std::vector<int>(base_keys.size(), kInvalidParams);
  }
  std::vector<int> codes(base_keys.size(), kOk);
  std::vector<std::string> keys;
  std::vector<HeldTensor> held;
  std::vector<size_t> owner;  // shard -> base key
  ReplicateConfig c = config;
  c.group_ids.clear();
  for (size_t i = 0; i < base_keys.size(); ++i) {
    const std::string where = std::string(call) + " '" + base_keys[i] + "': ";
    py::tuple chunks;
    try {
      chunks = tensors[i].attr("chunk")(tp_size, split_dim).cast<py::tuple>();
    } catch (const py::error_already_set& e) {
      Warn(where + e.what());
      codes[i] = kInvalidParams;
      continue;
    } catch (const py::cast_error& e) {
      Warn(where + e.what());
      codes[i] = kInvalidParams;
      continue;
    }
    if (static_cast<int>(chunks.size()) != tp_size) {
      Warn(where + "splitting dimension " + std::to_string(split_dim) + " gives " +
           std::to_string(chunks.size()) + " chunks, not tp_size " + std::to_string(tp_size));
      codes[i] = kInvalidParams;
      continue;
    }
    std::vector<HeldTensor> shards;
    for (int r = 0; r < tp_size; ++r) {
      py::object chunk;
      try {
        chunk = chunks[r].attr("contiguous")();
      } catch (const py::error_already_set& e) {
        Warn(where + e.what());
        break;
      }
      std::optional<HeldTensor> h = HoldTensor(chunk, TpShardKey(base_keys[i], r), call);
      if (!h.has_value()) break;
      labels.ApplyTo(h->meta);
      h->meta.set_tp_rank(static_cast<uint32_t>(r));
      h->meta.set_tp_size(static_cast<uint32_t>(tp_size));
      shards.push_back(std::move(*h));
    }
    if (static_cast<int>(shards.size()) != tp_size) {
      codes[i] = kInvalidParams;
      continue;
    }
    for (int r = 0; r < tp_size; ++r) {
      keys.push_back(TpShardKey(base_keys[i], r));
      held.push_back(std::move(shards[r]));
      owner.push_back(i);
      if (!config.group_ids.empty()) {
        c.group_ids.push_back(config.group_ids.size() == 1 ? config.group_ids[0]
                                                           : config.group_ids[i]);
      }
    }
  }
  if (held.empty()) return codes;
  const std::vector<int> r = PutHeld(s, keys, held, c);
  for (size_t j = 0; j < r.size(); ++j) {
    if (r[j] != kOk && codes[owner[j]] == kOk) codes[owner[j]] = r[j];
  }
  return codes;
}

// get_tensor / batch_get_tensor: a tensor or None per key (None without a
// warning on a plain miss).
py::list GetTensors(DistributedStore& s, const std::vector<std::string>& keys,
                    std::string_view call) {
  std::vector<std::optional<client::StoredObject>> got;
  std::vector<int> codes;
  {
    const std::vector<std::string_view> k(keys.begin(), keys.end());
    py::gil_scoped_release release;
    got = s.GetObjects(k, &codes);
  }
  py::list out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!got[i].has_value()) {
      if (codes[i] != kObjectNotFound) {
        Warn(std::string(call) + " '" + keys[i] + "': " + std::string(MooncakeCodeName(codes[i])) +
             " (" + std::to_string(codes[i]) + ")");
      }
      out.append(py::none());
      continue;
    }
    out.append(ToTensor(*got[i], keys[i], call));
  }
  return out;
}

py::list OneItem(const py::object& o) {
  py::list l;
  l.append(o);
  return l;
}

std::vector<std::string> ShardKeys(const std::vector<std::string>& base_keys, int tp_rank) {
  std::vector<std::string> out;
  out.reserve(base_keys.size());
  for (const std::string& k : base_keys) out.push_back(TpShardKey(k, tp_rank));
  return out;
}

// What query_objects returns per object.
struct ObjectInfoPy {
  py::object key;            // str (undecodable bytes as surrogate escapes)
  uint64_t size = 0;         // what a read returns (the raw tensor of a compressed object)
  uint64_t stored_size = 0;  // the bytes in the pool
  uint64_t version = 0;
  bool has_tensor = false;
  std::string model;
  uint32_t layer_begin = 0, layer_end = 0, tp_rank = 0, tp_size = 0, block_tokens = 0;
  std::string dtype;  // torch name; "" without TensorMeta
  std::vector<uint64_t> shape;
};

ObjectInfoPy ToInfo(const client::QueriedObject& o) {
  ObjectInfoPy p;
  p.key = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(o.key.data(), static_cast<Py_ssize_t>(o.key.size()), "surrogateescape"));
  if (!p.key) throw py::error_already_set();
  p.size = o.value_bytes;
  p.stored_size = o.info.size_bytes();
  p.version = o.info.version();
  p.has_tensor = o.info.has_tensor();
  if (p.has_tensor) {
    const proto::TensorMeta& t = o.info.tensor();
    p.model = t.model();
    p.layer_begin = t.layer_begin();
    p.layer_end = t.layer_end();
    p.tp_rank = t.tp_rank();
    p.tp_size = t.tp_size();
    p.block_tokens = t.block_tokens();
    if (auto d = DTypeByProto(t.dtype()); d.has_value()) p.dtype = std::string(d->torch_name);
    p.shape.assign(t.shape().begin(), t.shape().end());
  }
  return p;
}

void BindTensorCalls(py::class_<DistributedStore>& store) {
  using Store = DistributedStore;
  store
      .def(
          "put_tensor",
          [](Store& s, const std::string& key, const py::object& tensor, const std::string& model,
             uint32_t layer_begin, uint32_t layer_end, uint32_t block_tokens) {
            return PutTensors(s, {key}, OneItem(tensor), {}, "put_tensor",
                              TensorLabels{model, layer_begin, layer_end, block_tokens})
                .front();
          },
          py::arg("key"), py::arg("tensor"), py::kw_only(), py::arg("model") = "",
          py::arg("layer_begin") = 0, py::arg("layer_end") = 0, py::arg("block_tokens") = 0,
          "Store a CPU tensor (dtype and shape kept). 0 or a negative code.")
      .def(
          "pub_tensor",
          [](Store& s, const std::string& key, const py::object& tensor,
             const ReplicateConfig& config, const std::string& model, uint32_t layer_begin,
             uint32_t layer_end, uint32_t block_tokens) {
            if (!PubConfigOk(config)) return kInvalidParams;
            return PutTensors(s, {key}, OneItem(tensor), config, "pub_tensor",
                              TensorLabels{model, layer_begin, layer_end, block_tokens})
                .front();
          },
          py::arg("key"), py::arg("tensor"), py::arg("config") = ReplicateConfig{}, py::kw_only(),
          py::arg("model") = "", py::arg("layer_begin") = 0, py::arg("layer_end") = 0,
          py::arg("block_tokens") = 0)
      .def(
          "put_tensor_with_tp",
          [](Store& s, const std::string& key, const py::object& tensor, int tp_rank, int tp_size,
             int split_dim, const std::string& model, uint32_t layer_begin, uint32_t layer_end,
             uint32_t block_tokens) {
            (void)tp_rank;  // every rank's shard is stored, as Mooncake does
            const py::list one = OneItem(tensor);
            const TensorLabels labels{model, layer_begin, layer_end, block_tokens};
            if (tp_size <= 1) return PutTensors(s, {key}, one, {}, "put_tensor", labels).front();
            return PutTensorsTp(s, {key}, one, {}, tp_size, split_dim, "put_tensor_with_tp", labels)
                .front();
          },
          py::arg("key"), py::arg("tensor"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1,
          py::arg("split_dim") = 0, py::kw_only(), py::arg("model") = "",
          py::arg("layer_begin") = 0, py::arg("layer_end") = 0, py::arg("block_tokens") = 0,
          "Split the tensor into tp_size chunks on split_dim and store chunk r under "
          "key + '_tp_' + r. 0 or a negative code.")
      .def(
          "pub_tensor_with_tp",
          [](Store& s, const std::string& key, const py::object& tensor,
             const ReplicateConfig& config, int tp_rank, int tp_size, int split_dim,
             const std::string& model, uint32_t layer_begin, uint32_t layer_end,
             uint32_t block_tokens) {
            (void)tp_rank;
            if (!PubConfigOk(config)) return kInvalidParams;
            const py::list one = OneItem(tensor);
            const TensorLabels labels{model, layer_begin, layer_end, block_tokens};
            if (tp_size <= 1) {
              return PutTensors(s, {key}, one, config, "pub_tensor", labels).front();
            }
            return PutTensorsTp(s, {key}, one, config, tp_size, split_dim, "pub_tensor_with_tp",
                                labels)
                .front();
          },
          py::arg("key"), py::arg("tensor"), py::arg("config") = ReplicateConfig{},
          py::arg("tp_rank") = 0, py::arg("tp_size") = 1, py::arg("split_dim") = 0, py::kw_only(),
          py::arg("model") = "", py::arg("layer_begin") = 0, py::arg("layer_end") = 0,
          py::arg("block_tokens") = 0)
      .def(
          "batch_put_tensor",
          [](Store& s, const std::vector<std::string>& keys, const py::list& tensors_list,
             const std::string& model, uint32_t layer_begin, uint32_t layer_end,
             uint32_t block_tokens) {
            return PutTensors(s, keys, tensors_list, {}, "batch_put_tensor",
                              TensorLabels{model, layer_begin, layer_end, block_tokens});
          },
          py::arg("keys"), py::arg("tensors_list"), py::kw_only(), py::arg("model") = "",
          py::arg("layer_begin") = 0, py::arg("layer_end") = 0, py::arg("block_tokens") = 0)
      .def(
          "batch_pub_tensor",
          [](Store& s, const std::vector<std::string>& keys, const py::list& tensors_list,
             const ReplicateConfig& config) {
            if (!PubConfigOk(config)) return std::vector<int>(keys.size(), kInvalidParams);
            return PutTensors(s, keys, tensors_list, config, "batch_pub_tensor");
          },
          py::arg("keys"), py::arg("tensors_list"), py::arg("config") = ReplicateConfig{})
      .def(
          "batch_put_tensor_with_tp",
          [](Store& s, const std::vector<std::string>& base_keys, const py::list& tensors_list,
             int tp_rank, int tp_size, int split_dim) {
            (void)tp_rank;
            if (tp_size <= 1) return PutTensors(s, base_keys, tensors_list, {}, "batch_put_tensor");
            return PutTensorsTp(s, base_keys, tensors_list, {}, tp_size, split_dim,
                                "batch_put_tensor_with_tp");
          },
          py::arg("base_keys"), py::arg("tensors_list"), py::arg("tp_rank") = 0,
          py::arg("tp_size") = 1, py::arg("split_dim") = 0)
      .def(
          "batch_pub_tensor_with_tp",
          [](Store& s, const std::vector<std::string>& base_keys, const py::list& tensors_list,
             const ReplicateConfig& config, int tp_rank, int tp_size, int split_dim) {
            (void)tp_rank;
            if (!PubConfigOk(config)) return std::vector<int>(base_keys.size(), kInvalidParams);
            if (tp_size <= 1) {
              return PutTensors(s, base_keys, tensors_list, config, "batch_pub_tensor");
            }
            return PutTensorsTp(s, base_keys, tensors_list, config, tp_size, split_dim,
                                "batch_pub_tensor_with_tp");
          },
          py::arg("base_keys"), py::arg("tensors_list"), py::arg("config") = ReplicateConfig{},
          py::arg("tp_rank") = 0, py::arg("tp_size") = 1, py::arg("split_dim") = 0)
      .def(
          "get_tensor",
          [](Store& s, const std::string& key) {
            return py::object(GetTensors(s, {key}, "get_tensor")[0]);
          },
          py::arg("key"), "The stored tensor, or None.")
      .def(
          "get_tensor_with_tp",
          [](Store& s, const std::string& key, int tp_rank, int tp_size, int split_dim) {
            (void)split_dim;  // the shard is read as stored, as Mooncake does
            const std::string k = tp_size <= 1 ? key : TpShardKey(key, tp_rank);
            return py::object(GetTensors(s, {k}, "get_tensor_with_tp")[0]);
          },
          py::arg("key"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1, py::arg("split_dim") = 0,
          "Rank tp_rank's shard (key + '_tp_' + tp_rank), or None.")
      .def(
          "batch_get_tensor",
          [](Store& s, const std::vector<std::string>& keys) {
            return GetTensors(s, keys, "batch_get_tensor");
          },
          py::arg("keys"))
      .def(
          "batch_get_tensor_with_tp",
          [](Store& s, const std::vector<std::string>& base_keys, int tp_rank, int tp_size) {
            return GetTensors(s, tp_size <= 1 ? base_keys : ShardKeys(base_keys, tp_rank),
                              "batch_get_tensor_with_tp");
          },
          py::arg("base_keys"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1);
}

void BindGroupCalls(py::module_& m, py::class_<DistributedStore>& store) {
  using Store = DistributedStore;
  py::class_<ObjectInfoPy>(m, "ObjectInfo", "One object of query_objects.")
      .def_readonly("key", &ObjectInfoPy::key)
      .def_readonly("size", &ObjectInfoPy::size)
      .def_readonly("stored_size", &ObjectInfoPy::stored_size)
      .def_readonly("version", &ObjectInfoPy::version)
      .def_readonly("has_tensor", &ObjectInfoPy::has_tensor)
      .def_readonly("model", &ObjectInfoPy::model)
      .def_readonly("layer_begin", &ObjectInfoPy::layer_begin)
      .def_readonly("layer_end", &ObjectInfoPy::layer_end)
      .def_readonly("tp_rank", &ObjectInfoPy::tp_rank)
      .def_readonly("tp_size", &ObjectInfoPy::tp_size)
      .def_readonly("block_tokens", &ObjectInfoPy::block_tokens)
      .def_readonly("dtype", &ObjectInfoPy::dtype)
      .def_readonly("shape", &ObjectInfoPy::shape)
      .def("__repr__", [](const ObjectInfoPy& o) {
        return "ObjectInfo(key=" + py::repr(o.key).cast<std::string>() +
               ", size=" + std::to_string(o.size) + ", model='" + o.model + "', layers=[" +
               std::to_string(o.layer_begin) + ", " + std::to_string(o.layer_end) +
               "), tp_rank=" + std::to_string(o.tp_rank) + ", dtype='" + o.dtype + "')";
      });
  const py::call_guard<py::gil_scoped_release> nogil;
  store
      .def(
          "clone",
          [](Store& s, const std::vector<std::string>& src_keys,
             const std::vector<std::string>& dst_keys) {
            const std::vector<std::string_view> src(src_keys.begin(), src_keys.end());
            const std::vector<std::string_view> dst(dst_keys.begin(), dst_keys.end());
            py::gil_scoped_release release;
            return s.Clone(src, dst);
          },
          py::arg("src_keys"), py::arg("dst_keys"),
          "dst_keys[i] becomes a clone of src_keys[i] (bytes shared, not copied); all or "
          "nothing. 0 or a negative code.")
      .def(
          "clone_prefix",
          [](Store& s, const std::string& src_prefix, const std::string& dst_prefix) {
            return s.ClonePrefix(src_prefix, dst_prefix);
          },
          py::arg("src_prefix"), py::arg("dst_prefix"), nogil,
          "Clone every key starting with src_prefix to dst_prefix + the rest; all or nothing. "
          "The number cloned, or a negative code.")
      .def(
          "commit_group",
          [](Store& s, const std::string& group_id) { return s.CommitGroup(group_id); },
          py::arg("group_id"), nogil,
          "Make every member of the group visible at once. 0 or a negative code.")
      .def(
          "remove_group",
          [](Store& s, const std::string& group_id, bool force) {
            return s.RemoveGroup(group_id, force);
          },
          py::arg("group_id"), py::arg("force") = false, nogil,
          "Remove every member of the group. The number removed, or a negative code.")
      .def(
          "query_objects",
          [](Store& s, const std::string& model, std::optional<int64_t> layer_begin,
             std::optional<int64_t> layer_end, int64_t tp_rank, const std::string& start_after,
             uint64_t limit) -> std::pair<std::vector<ObjectInfoPy>, int> {
            client::ObjectQuery q;
            q.model = model;
            if (layer_begin.has_value() != layer_end.has_value() || tp_rank < -1 ||
                tp_rank > INT32_MAX) {
              return {{}, kInvalidParams};
            }
            if (layer_begin.has_value()) {
              if (*layer_begin < 0 || *layer_end < *layer_begin || *layer_end > UINT32_MAX) {
                return {{}, kInvalidParams};
              }
              q.layers = std::make_pair(static_cast<uint32_t>(*layer_begin),
                                        static_cast<uint32_t>(*layer_end));
            }
            q.tp_rank = static_cast<int32_t>(tp_rank);
            q.start_after = start_after;
            if (limit != 0) q.objects_max = limit;
            std::pair<std::vector<client::QueriedObject>, int> r;
            {
              py::gil_scoped_release release;
              r = s.QueryObjects(q);
            }
            std::vector<ObjectInfoPy> out;
            out.reserve(r.first.size());
            for (const client::QueriedObject& o : r.first) out.push_back(ToInfo(o));
            return {std::move(out), r.second};
          },
          py::arg("model") = "", py::arg("layer_begin") = py::none(),
          py::arg("layer_end") = py::none(), py::arg("tp_rank") = -1, py::kw_only(),
          py::arg("start_after") = "", py::arg("limit") = 0,
          "Visible objects whose TensorMeta matches: (list of ObjectInfo in key order, 0) or "
          "([], negative code).");
}

}  // namespace

void BindObjectCalls(py::module_& m, py::class_<DistributedStore>& store) {
  BindTensorCalls(store);
  BindGroupCalls(m, store);
}

}  // namespace mooncake::compat
