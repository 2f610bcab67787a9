"""mooncake: Python API of the mooncake KV-cache store.

`mooncake.store` is a drop-in for Mooncake Store's Python module: the class
`MooncakeDistributedStore` with `ReplicateConfig` and `SoftPinAction`
(docs/python.md lists every call, its semantics and the differences).
"""

__version__ = "0.1.0"
