#!/usr/bin/env python3
"""Acceptance checks of `quanttool convert --format gguf` with gguf-py.

Needs numpy and the `gguf` package (a local virtual environment); never run in CI.

  check_gguf_export.py readback OUT.gguf [--bin QUANTTOOL]
      gguf-py reads every tensor of OUT.gguf (GGUFReader + gguf.quants.dequantize) and the values
      must equal, bit for bit, quanttool's own dequantization of the file (`convert --dtype f32`
      back to a Hugging Face folder; Q/K rows un-permuted there, so gguf-py's are un-permuted with
      convert_hf_to_gguf.py's permutation inverted). rope_freqs.weight is folded into config.json
      by quanttool; it is compared with the divisors the config implies is not done here.
  check_gguf_export.py compare A.gguf B.gguf
      per tensor: name, shape, type, and bytes equal (e.g. ours against llama-quantize's of the
      same type); for tensors whose bytes differ, the largest dequantized difference.
Prints a one-line verdict (exit code 0 on PASS, 1 on FAIL).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def hf_names_by_gguf(hf_names, arch, n_blocks):
    """Our HF names keyed by their GGUF names, from gguf-py's own map (gguf/tensor_mapping.py)."""
    m = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], n_blocks)
    return {m.get_name(h, try_suffixes=(".weight", ".bias")): h for h in hf_names}


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf.py LlamaModel.permute (heads of [2, hd/2] -> [hd/2, 2])."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_safetensors_dir(d):
    out = {}
    files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    for fn in files:
        with open(os.path.join(d, fn), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
            data = f.read()
        for name, info in head.items():
            if name == "__metadata__":
                continue
            assert info["dtype"] == "F32", (name, info["dtype"])
            a, b = info["data_offsets"]
            out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(info["shape"])
    return out


def field(r, key):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def readback(path, binary):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    n_head, n_kv = field(r, f"{arch}.attention.head_count"), field(r, f"{arch}.attention.head_count_kv")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "hf")
        subprocess.run([binary, "convert", "--in", path, "--out", out, "--dtype", "f32"], check=True,
                       stdout=subprocess.DEVNULL)
        ours = read_safetensors_dir(out)
        hf_name = hf_names_by_gguf(ours, arch, field(r, f"{arch}.block_count")).get
        bad, n = [], 0
        for t in r.tensors:
            if t.name == "rope_freqs.weight":
                continue
            v = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
            if arch == "llama" and t.name.endswith("attn_q.weight"):
                v = unpermute(v, n_head)
            if arch == "llama" and t.name.endswith("attn_k.weight"):
                v = unpermute(v, n_kv)
            q = ours[hf_name(t.name)]
            n += 1
            if v.shape != q.shape or not np.array_equal(v.astype(np.float32).view(np.uint32), q.view(np.uint32)):
                bad.append(t.name)
    types = sorted({t.tensor_type.name for t in r.tensors})
    if bad:
        print(f"FAIL: {len(bad)} of {n} tensors differ between gguf-py and quanttool: {bad[:5]}")
        return 1
    print(f"PASS: gguf-py reads all {n} tensors of {path} ({', '.join(types)}) bit-identically to quanttool")
    return 0


def compare(a, b):
    ra, rb = gguf.GGUFReader(a), gguf.GGUFReader(b)
    ta, tb = {t.name: t for t in ra.tensors}, {t.name: t for t in rb.tensors}
    if set(ta) != set(tb):
        print(f"FAIL: tensor sets differ: only in A {sorted(set(ta) - set(tb))[:5]}, only in B {sorted(set(tb) - set(ta))[:5]}")
        return 1
    same, diff = 0, []
    for name, x in ta.items():
        y = tb[name]
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            diff.append((name, f"{x.tensor_type.name}{list(x.shape)} vs {y.tensor_type.name}{list(y.shape)}"))
            continue
        if np.array_equal(np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)):
            same += 1
            continue
        dx = gguf.quants.dequantize(x.data, x.tensor_type)
        dy = gguf.quants.dequantize(y.data, y.tensor_type)
        nb = int(np.count_nonzero(np.asarray(x.data).view(np.uint8) != np.asarray(y.data).view(np.uint8)))
        diff.append((name, f"{nb} bytes differ, max |dequantized diff| {float(np.max(np.abs(dx - dy))):.3g}"))
    types = sorted({t.tensor_type.name for t in ra.tensors})
    if diff:
        for name, why in diff[:10]:
            print(f"  {name}: {why}")
        print(f"FAIL: {same} of {len(ta)} tensors byte-identical ({', '.join(types)}); {len(diff)} differ")
        return 1
    print(f"PASS: all {len(ta)} tensors byte-identical ({', '.join(types)})")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("readback")
    r.add_argument("gguf")
    r.add_argument("--bin", default=os.path.join(ROOT, "build", "quanttool"))
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    a = p.parse_args()
    sys.exit(readback(a.gguf, a.bin) if a.cmd == "readback" else compare(a.a, a.b))


if __name__ == "__main__":
    main()
