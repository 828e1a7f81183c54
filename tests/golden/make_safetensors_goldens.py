#!/usr/bin/env python3
"""Golden files for tests/test_safetensors.cpp, written by the reference libraries.

  read.safetensors   + read.json    several dtypes and __metadata__, written by
                                    safetensors.torch.save_file; read.json holds what was stored
                                    (dtype, shape, raw bytes as hex, values, data order).
  write_ref.safetensors             written by safetensors.torch.save_file with one metadata key
                                    (the reference writes __metadata__ from a HashMap, so its key
                                    order is arbitrary beyond one key): our writer must reproduce
                                    it byte for byte.
  sharded/                          huggingface_hub.save_torch_state_dict with a 200-byte shard
                                    limit: shard files, index, and order.json (the state dict's
                                    insertion order, which decides the split) and each tensor's
                                    bytes.
  cases.json                        small valid and malformed files with the reference reader's
                                    verdict (safetensors.deserialize: accepted, or its error).

Run from the repository root:  python3 tests/golden/make_safetensors_goldens.py
"""
import json
import os
import shutil

import huggingface_hub
import safetensors
import torch
from huggingface_hub import save_torch_state_dict
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors")

ST_NAME = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}


def raw_bytes(t):
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def values(t):
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16):
        return t.float().reshape(-1).tolist()
    if t.dtype == torch.bool:
        return [int(x) for x in t.reshape(-1).tolist()]
    return t.reshape(-1).tolist()


def header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


def read_golden():
    g = torch.Generator().manual_seed(1234)
    t = {
        "f32": torch.tensor([[1.5, -0.0, 1e-40], [3.4e38, -2.25, 0.1]], dtype=torch.float32),
        "f16": torch.tensor([65504.0, 6e-8, -1.0, 0.333], dtype=torch.float16),
        "bf16": torch.tensor([[1.0, -3.140625], [1e-30, 2.0e38]], dtype=torch.bfloat16),
        "f64": torch.tensor([0.1, -1e300, 5e-324], dtype=torch.float64),
        "i8": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
        "u8": torch.tensor([[0, 1], [128, 255]], dtype=torch.uint8),
        "i16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i32": torch.tensor([-2147483648, 7, 2147483647], dtype=torch.int32),
        "i64": torch.tensor([-(2**63), 2**53 + 1], dtype=torch.int64),
        "bool": torch.tensor([True, False, True]),
        "f8_e4m3": torch.tensor([0.5, -448.0, 0.015625, 3.0]).to(torch.float8_e4m3fn),
        "scalar": torch.tensor(2.5, dtype=torch.float32),
        "empty": torch.zeros((0, 3), dtype=torch.float32),
        "model.layers.0.mlp.down_proj.weight": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "model.embed_tokens.weight": torch.randn(4, 2, generator=g).to(torch.float16),
    }
    meta = {"format": "pt", "source": "make_safetensors_goldens.py", "note": 'ünïcode "quoted"\n'}
    path = os.path.join(OUT, "read.safetensors")
    save_file(t, path, metadata=meta)
    h = header(path)
    order = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"])
    desc = {
        "generator": f"safetensors {safetensors.__version__}, torch {torch.__version__}",
        "metadata": meta,
        "data_order": order,
        "tensors": {
            k: {"dtype": ST_NAME[v.dtype], "shape": list(v.shape), "hex": raw_bytes(v).hex(),
                "values": values(v)}
            for k, v in t.items()
        },
    }
    with open(os.path.join(OUT, "read.json"), "w") as f:
        json.dump(desc, f, indent=1, ensure_ascii=False)
        f.write("\n")


def write_golden():
    g = torch.Generator().manual_seed(99)
    t = {
        "b.weight": torch.randn(2, 3, generator=g).to(torch.float16),
        "a.weight": torch.randn(3, generator=g).to(torch.float16),
        "layer.10": torch.randn(2, generator=g),
        "layer.2": torch.randn(1, generator=g),
        'q"uo\\te/\n\x01\x7fé': torch.tensor([7, 8, 9], dtype=torch.uint8),  # JSON escapes
        "bool": torch.tensor([True, False]),
        "i64": torch.tensor([5, -6], dtype=torch.int64),
        "z": torch.randn(5, generator=g).to(torch.bfloat16),  # odd byte count before 1-byte types
        "e": torch.tensor([-3], dtype=torch.int8),
        "scalar": torch.tensor(1.0, dtype=torch.float32),
        "empty": torch.zeros((0,), dtype=torch.float64),
        "f8": torch.tensor([1.0, -2.0]).to(torch.float8_e5m2),
    }
    save_file(t, os.path.join(OUT, "write_ref.safetensors"), metadata={"format": "pt"})


def sharded_golden():
    d = os.path.join(OUT, "sharded")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    g = torch.Generator().manual_seed(7)
    # 120 B, 60 B, 300 B (over the limit: a shard of its own, listed before the open shard),
    # 100 B, 80 B -> 3 shards: [t2], [t0, t1], [t3, t4].
    sd = {
        "model.t0": torch.randn(30, generator=g),
        "model.t1": torch.randn(30, generator=g).to(torch.bfloat16),
        "model.t2": torch.randn(75, generator=g),
        "model.t3": torch.randn(25, generator=g),
        "model.t4": torch.randint(-100, 100, (80,), generator=g, dtype=torch.int8),
    }
    save_torch_state_dict(sd, d, max_shard_size=200)
    with open(os.path.join(d, "order.json"), "w") as f:
        json.dump({"generator": f"huggingface_hub {huggingface_hub.__version__}",
                   "max_shard_size": 200, "order": list(sd),
                   "hex": {k: raw_bytes(v).hex() for k, v in sd.items()}}, f, indent=1)
        f.write("\n")


def st_file(hdr, data=b"", hlen=None):
    hb = hdr.encode() if isinstance(hdr, str) else hdr
    return (len(hb) if hlen is None else hlen).to_bytes(8, "little") + hb + data


def info(dtype, shape, b, e):
    return json.dumps({"dtype": dtype, "shape": shape, "data_offsets": [b, e]})


def malformed_cases():
    """Edge cases around every rule of read_metadata/validate; the verdict is the reference's."""
    U8 = lambda n, b, e: info("U8", [n], b, e)  # noqa: E731
    ok2 = '{"a":' + U8(2, 0, 2) + "}"
    c = {
        "valid": st_file(ok2, b"xy"),
        "empty_header": st_file("{}"),
        "short_7_bytes": b"\x02\x00\x00\x00\x00\x00\x00",
        "hlen_past_eof": st_file(ok2, b"xy", hlen=1000),
        "hlen_too_large": st_file(ok2, b"xy", hlen=100_000_001),
        "hlen_u64_max": st_file(ok2, b"xy", hlen=2**64 - 1),
        "truncated_data": st_file(ok2, b"x"),
        "trailing_byte": st_file(ok2, b"xyz"),
        "invalid_json": st_file('{"a":', b""),
        "invalid_utf8": st_file(b'{"\xff":' + U8(2, 0, 2).encode() + b"}", b"xy"),
        "overlong_utf8": st_file(b'{"\xc0\xaf":' + U8(2, 0, 2).encode() + b"}", b"xy"),
        "surrogate_utf8": st_file(b'{"\xed\xa0\x80":' + U8(2, 0, 2).encode() + b"}", b"xy"),
        "bom": st_file(b"\xef\xbb\xbf" + ok2.encode(), b"xy"),
        "array_header": st_file("[]"),
        "string_header": st_file('"x"'),
        "leading_space": st_file("  " + ok2, b"xy"),
        "padding_ws": st_file(ok2 + " \t\r\n", b"xy"),
        "padding_nul": st_file(ok2 + "\0", b"xy"),
        "unknown_dtype": st_file('{"a":' + info("F17", [2], 0, 2) + "}", b"xy"),
        "lowercase_dtype": st_file('{"a":' + info("u8", [2], 0, 2) + "}", b"xy"),
        "size_mismatch": st_file('{"a":' + info("F32", [2], 0, 2) + "}", b"xy"),
        "overlap": st_file('{"a":' + U8(2, 0, 2) + ',"b":' + U8(2, 1, 3) + "}", b"xyz"),
        "gap": st_file('{"a":' + U8(1, 0, 1) + ',"b":' + U8(1, 2, 3) + "}", b"xyz"),
        "not_from_zero": st_file('{"a":' + U8(2, 1, 3) + "}", b"xyz"),
        "out_of_range": st_file('{"a":' + U8(4, 0, 4) + "}", b"xy"),
        "end_before_begin": st_file('{"a":' + U8(0, 2, 0) + "}", b"xy"),
        "unsorted_keys_ok": st_file('{"b":' + U8(1, 1, 2) + ',"a":' + U8(1, 0, 1) + "}", b"xy"),
        "empty_tensors_ok": st_file('{"a":' + U8(0, 0, 0) + ',"b":' + U8(0, 0, 0) + "}"),
        "missing_shape": st_file('{"a":{"dtype":"U8","data_offsets":[0,2]}}', b"xy"),
        "extra_field_ok": st_file('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":[{}]}}',
                                  b"xy"),
        "dup_dtype_field": st_file('{"a":{"dtype":"U8","dtype":"U8","shape":[2],"data_offsets":[0,2]}}',
                                   b"xy"),
        "three_offsets": st_file('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2,2]}}', b"xy"),
        "negative_dim": st_file('{"a":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}}', b"xy"),
        "minus_zero_dim": st_file('{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}'),
        "float_dim": st_file('{"a":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}}', b"xy"),
        "shape_overflow": st_file('{"a":' + info("U8", [2**32, 2**32, 0], 0, 0) + "}"),
        "bits_overflow": st_file('{"a":' + info("F64", [2**61], 0, 0) + "}"),
        "f4_half_byte": st_file('{"a":' + info("F4", [3], 0, 2) + "}", b"xy"),
        "meta_null_ok": st_file('{"__metadata__":null,"a":' + U8(2, 0, 2) + "}", b"xy"),
        "meta_int_value": st_file('{"__metadata__":{"k":1},"a":' + U8(2, 0, 2) + "}", b"xy"),
        "meta_not_object": st_file('{"__metadata__":"x","a":' + U8(2, 0, 2) + "}", b"xy"),
        "meta_duplicate": st_file('{"__metadata__":{},"__metadata__":{},"a":' + U8(2, 0, 2) + "}",
                                  b"xy"),
        "tensor_not_object": st_file('{"a":[1]}'),
        "huge_number_in_extra": st_file('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],'
                                        '"x":1e400}}', b"xy"),
    }
    for depth in (125, 126):  # + 2 enclosing objects: 127 accepted, 128 over serde's limit
        c[f"nesting_{depth + 2}"] = st_file(
            '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":' + "[" * depth + "]" * depth
            + "}}", b"xy")
    # Forms serde happens to accept (a struct written as a sequence, an enum as a one-key map)
    # that the format (safetensors' README; docs/spec/safetensors.md) does not describe and no writer
    # produces: quanttool refuses them.
    deviations = {
        "tensor_as_sequence": st_file('{"a":["U8",[2],[0,2]]}', b"xy"),
        "dtype_as_map": st_file('{"a":{"dtype":{"U8":null},"shape":[2],"data_offsets":[0,2]}}', b"xy"),
    }
    c.update(deviations)
    out = {}
    for name, b in c.items():
        try:
            safetensors.deserialize(b)
            verdict = "ok"
        except Exception as e:  # the reference's rejection, whatever its type
            verdict = "error: " + str(e).splitlines()[0][:200]
        out[name] = {"hex": b.hex(), "reference": verdict}
        if name in deviations:
            out[name]["quanttool"] = "error"
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"generator": f"safetensors {safetensors.__version__}", "cases": out}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    read_golden()
    write_golden()
    sharded_golden()
    malformed_cases()
    for root, _, files in os.walk(OUT):
        for name in sorted(files):
            p = os.path.join(root, name)
            print(os.path.relpath(p, OUT), os.path.getsize(p))
