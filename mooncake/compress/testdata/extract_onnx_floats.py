#!/usr/bin/env python3
"""Extracts the float32 initializers of ONNX models without the onnx package.

ONNX files are protobuf ModelProto messages; we walk just enough of the wire format:
ModelProto.graph (7) -> GraphProto.initializer (5), or GraphProto.node (1) ->
NodeProto.attribute (5) -> AttributeProto.t (5) -> TensorProto {dims 1, data_type 2,
float_data 4, name 8, raw_data 9}. data_type 1 is FLOAT. Usage:
  extract_onnx_floats.py OUT_DIR MODEL.onnx...
"""
import array
import os
import struct
import sys


def varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def fields(buf):
    """Yields (field number, wire type, value) of one message."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield number, wire, value


def graph_tensors(graph):
    """Initializers (GraphProto field 5) and Constant nodes' tensors (NodeProto field 5 =
    AttributeProto, whose field 5 is a TensorProto); paddle2onnx exports use the latter."""
    for gnum, _, value in fields(graph):
        if gnum == 5:
            yield value
        elif gnum == 1:
            for nnum, _, attr in fields(value):
                if nnum == 5:
                    for anum, _, t in fields(attr):
                        if anum == 5:
                            yield t


def tensors(model):
    for number, _, graph in fields(model):
        if number != 7:
            continue
        for tensor in graph_tensors(graph):
            dims, dtype, name, raw, floats = [], 0, "", None, bytearray()
            for tnum, wire, value in fields(tensor):
                if tnum == 1:
                    if wire == 2:  # packed
                        p = 0
                        while p < len(value):
                            d, p = varint(value, p)
                            dims.append(d)
                    else:
                        dims.append(value)
                elif tnum == 2:
                    dtype = value
                elif tnum == 4:
                    floats += value
                elif tnum == 8:
                    name = bytes(value).decode("utf-8", "replace")
                elif tnum == 9:
                    raw = bytes(value)
            if dtype == 1:
                yield name, dims, raw if raw is not None else bytes(floats)


def to_bf16(values):
    out = array.array("H")
    for bits in values:
        if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x7FFFFF):
            out.append((bits >> 16) | 0x40)
        else:
            out.append(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF)
    return out


def to_fp16(floats):
    clamped = [max(-65504.0, min(65504.0, f)) for f in floats]
    return struct.pack("<%de" % len(clamped), *clamped)


def main():
    out_dir, models = sys.argv[1], sys.argv[2:]
    blob = bytearray()
    manifest = []
    for path in models:
        with open(path, "rb") as f:
            model = memoryview(f.read())
        for name, dims, data in tensors(model):
            manifest.append("%s\t%s\t%s\t%d" % (os.path.basename(path), name,
                                                "x".join(map(str, dims)), len(data) // 4))
            blob += data
    if not blob:
        sys.exit("no float32 initializers found")
    bits = array.array("I")
    bits.frombytes(bytes(blob))
    floats = array.array("f")
    floats.frombytes(bytes(blob))
    if sys.byteorder != "little":
        sys.exit("little-endian host required")
    with open(os.path.join(out_dir, "ocr_weights.f32"), "wb") as f:
        f.write(blob)
    with open(os.path.join(out_dir, "ocr_weights.bf16"), "wb") as f:
        f.write(to_bf16(bits).tobytes())
    with open(os.path.join(out_dir, "ocr_weights.fp16"), "wb") as f:
        f.write(to_fp16(floats))
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    print("extracted %d float32 weights from %d tensors in %d models into %s" %
          (len(floats), len(manifest), len(models), out_dir))


if __name__ == "__main__":
    main()
