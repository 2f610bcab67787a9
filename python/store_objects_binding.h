// The tensor, clone, object-group and query calls of mooncake.store's
// MooncakeDistributedStore (python/store_objects_binding.cc; docs/python.md).
#ifndef MOONCAKE_PYTHON_STORE_OBJECTS_BINDING_H_
#define MOONCAKE_PYTHON_STORE_OBJECTS_BINDING_H_

#include <pybind11/pybind11.h>

#include "mooncake/store/compat/distributed_store.h"

namespace mooncake::compat {

// Adds the calls to `store` and the ObjectInfo class to `m`. torch is
// imported lazily, inside the tensor calls: the module works without it.
void BindObjectCalls(pybind11::module_& m, pybind11::class_<DistributedStore>& store);

}  // namespace mooncake::compat

#endif  // MOONCAKE_PYTHON_STORE_OBJECTS_BINDING_H_
