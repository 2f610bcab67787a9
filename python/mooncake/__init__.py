"""mooncake: Python API of the mooncake KV-cache toolkit.

- `mooncake.store`: a drop-in for Mooncake Store's Python module, the class
  `MooncakeDistributedStore` with `ReplicateConfig` and `SoftPinAction`.
- `mooncake.engine`: a drop-in for Mooncake's transfer engine,
  `TransferEngine` (TCP).
- `mooncake.connector`: prefill -> decode KV transfer for engines
  (`PrefillConnector`, `DecodeConnector`, `layout_for`).

docs/python.md lists every call, its semantics and the differences from
Mooncake; docs/connector.md describes the connectors.
"""

__version__ = "0.1.0"
