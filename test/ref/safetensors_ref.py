#!/usr/bin/python3
"""Independent safetensors reader/writer (torch only) to cross-check lib/io/safetensors.c.

  safetensors_ref.py check FILE   read FILE (written by dtrain) and compare it with expected()
  safetensors_ref.py write FILE   write expected() the way huggingface's safetensors does
                                  (metadata first, tensors sorted by dtype alignment then name,
                                  header padded with spaces to 8 bytes)

If the real `safetensors` package is importable, `check` also loads FILE with it.
Exit status: 0 ok, 1 mismatch (printed), 2 usage.
"""
import json
import struct
import sys

import torch

DTYPES = {
    "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
METADATA = {"epoch": "3", "note": "héllo \"quoted\" \\ back"}


def values(name, dtype, shape):
    """Element i is (i + 1), negated at odd i for signed types; BOOL is i % 2 == 0."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.float64)
    if dtype == "BOOL":
        v = (i % 2 == 0)
    elif dtype == "U8":
        v = i + 1
    else:
        v = (i + 1) * torch.where(i % 2 == 1, -1.0, 1.0)
    return v.to(DTYPES[dtype]).reshape(shape)


def expected():
    # name -> (dtype, shape); must match test/unit/test_io_safetensors.c: cross_tensors[].
    spec = [
        ("dense/kernel", "F32", [2, 3]), ("half", "F16", [3]), ("brain", "BF16", [2, 2]),
        ("scalar", "F64", []), ("step", "I64", [4]), ("i32", "I32", [1, 2, 1]),
        ("i16", "I16", [3]), ("i8", "I8", [5]), ("u8", "U8", [3]), ("mask", "BOOL", [3]),
        ("empty", "F32", [0, 4]),
    ]
    return {name: (dt, shape, values(name, dt, shape)) for name, dt, shape in spec}


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = data[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    spans = []
    for name, e in header.items():
        b, end = e["data_offsets"]
        spans.append((b, end, name))
        raw = bytearray(buf[b:end]) if end > b else bytearray(8)  # frombuffer rejects empty
        t = torch.frombuffer(raw, dtype=DTYPES[e["dtype"]])
        nel = 1
        for d in e["shape"]:
            nel *= d
        out[name] = (e["dtype"], e["shape"], t[:nel].reshape(e["shape"]))
    return n, meta, out, spans, len(buf)


def check(path):
    errors = []
    n, meta, got, spans, buflen = read(path)
    if n % 8 != 0:
        errors.append(f"header length {n} is not a multiple of 8")
    pos = 0
    for b, e, name in sorted(spans):
        if b != pos:
            errors.append(f"{name}: begins at {b}, expected {pos}")
        pos = e
    if pos != buflen:
        errors.append(f"tensors cover {pos} of {buflen} bytes")
    if meta != METADATA:
        errors.append(f"metadata {meta!r} != {METADATA!r}")
    exp = expected()
    if set(got) != set(exp):
        errors.append(f"names {sorted(got)} != {sorted(exp)}")
    for name, (dt, shape, v) in exp.items():
        if name not in got:
            continue
        gdt, gshape, gv = got[name]
        if gdt != dt or list(gshape) != shape or not torch.equal(gv, v):
            errors.append(f"{name}: got {gdt} {gshape} {gv.tolist()}, want {dt} {shape} {v.tolist()}")
    try:
        from safetensors.torch import load_file  # the reference implementation, if installed
        ref = load_file(path)
        for name, (dt, shape, v) in exp.items():
            if not torch.equal(ref[name], v):
                errors.append(f"safetensors.torch: {name} differs")
    except ImportError:
        pass
    for e in errors:
        print("MISMATCH:", e)
    return 1 if errors else 0


def write(path):
    exp = expected()
    align = {k: v[2].element_size() for k, v in exp.items()}
    names = sorted(exp, key=lambda k: (-align[k], k))
    header = {"__metadata__": METADATA}
    blobs = []
    pos = 0
    for name in names:
        dt, shape, v = exp[name]
        b = raw_bytes(v)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "write"):
        print(__doc__)
        sys.exit(2)
    sys.exit(check(sys.argv[2]) if sys.argv[1] == "check" else write(sys.argv[2]))
