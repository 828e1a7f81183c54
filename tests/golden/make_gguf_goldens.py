#!/usr/bin/env python3
"""Golden GGUF files for tests/test_gguf.cpp, written by the `gguf` PyPI package (gguf-py).

Run:  python3 tests/golden/make_gguf_goldens.py   (gguf 0.19.0, numpy)

For each ggml type T we dequantize, tests/golden/gguf/<t>.gguf holds two tensors:
  "x"        : random raw blocks of type T (f16 scale fields replaced by sane random halves,
               since random bytes would give inf/NaN scales)
  "expected" : F32, gguf.quants.dequantize(x) -- the reference our C++ must match bit for bit.
K-quants come from random block bytes because gguf-py can only dequantize those.

metadata.gguf holds one key of every value type, arrays of every element type, a custom
alignment (64) and a few tensors, to check the reader against gguf-py's writer.

It also writes the libFuzzer seed corpus fuzz/corpus/gguf/ (tiny valid files, < 4 KB each).
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, GGUFValueType as V
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gguf")
rng = np.random.default_rng(20240607)

# Byte offsets of f16 scale fields inside each block (ggml-common.h block structs).
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0],
}
# (rows, cols) of "x": a few blocks each, so every file stays a few KB.
SHAPES = {T.F32: (4, 64), T.F16: (4, 64), T.BF16: (4, 64)}
for t in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.IQ4_NL):
    SHAPES[t] = (4, 128)
for t in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K):
    SHAPES[t] = (3, 256)


def sane_halves(n):
    """Random f16 scales: mostly normal magnitudes of both signs, plus 0 and a subnormal."""
    v = (rng.standard_normal(n) * rng.choice([1e-3, 1e-2, 0.1, 1.0], n)).astype(np.float16)
    if n > 2:
        v[0] = np.float16(0.0)
        v[1] = np.float16(3e-6)  # subnormal in f16
    return v


def make_raw(t, rows, cols):
    if t == T.F32:
        return rng.standard_normal((rows, cols)).astype(np.float32)
    if t == T.F16:
        v = (rng.standard_normal((rows, cols)) * 10).astype(np.float16)
        v.flat[:6] = np.array([0.0, -0.0, 6e-8, -3e-5, np.inf, -np.inf], dtype=np.float16)
        return v
    if t == T.BF16:
        v = rng.integers(0, 1 << 16, (rows, cols), dtype=np.uint16)
        exp = (v >> 7) & 0xFF
        v[exp == 0xFF] &= 0xBFFF  # no NaN/inf bit patterns: keep comparisons simple
        return v.view(np.uint8).reshape(rows, cols * 2)
    bs, ts = GGML_QUANT_SIZES[t]
    nblk = rows * cols // bs
    blocks = rng.integers(0, 256, (nblk, ts), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        blocks[:, off:off + 2] = sane_halves(nblk).view(np.uint8).reshape(nblk, 2)
    return blocks.reshape(rows, cols // bs * ts)


def write_type(t):
    rows, cols = SHAPES[t]
    raw = make_raw(t, rows, cols)
    expected = gguf.quants.dequantize(raw, t)
    expected = np.ascontiguousarray(expected, dtype=np.float32).reshape(rows, cols)
    path = os.path.join(OUT, t.name.lower() + ".gguf")
    w = gguf.GGUFWriter(path, arch="golden")
    w.add_string("golden.type", t.name)
    if t in (T.F32, T.F16):
        w.add_tensor("x", raw)
    else:
        w.add_tensor("x", raw, raw_dtype=t)
    w.add_tensor("expected", expected)
    finish(w)
    print(f"{path}: {os.path.getsize(path)} bytes")


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_metadata():
    path = os.path.join(OUT, "metadata.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -32000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool_true", True)
    w.add_bool("t.bool_false", False)
    w.add_string("t.str", "héllo wörld")
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000000)
    w.add_float64("t.f64", 2.718281828459045)
    w.add_key_value("t.arr_u8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.arr_i8", [-1, 0, 127], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("t.arr_u16", [7, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("t.arr_i16", [-7, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("t.arr_u32", [4294967295, 3], V.ARRAY, sub_type=V.UINT32)
    w.add_array("t.arr_i32", [-5, 6, 7])  # gguf-py: python int -> INT32
    w.add_array("t.arr_f32", [0.5, -1.25, 3.0e-3])  # python float -> FLOAT32
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_str", ["a", "", "Ġt ok"])
    w.add_key_value("t.arr_u64", [18446744073709551615, 1], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("t.arr_i64", [-9223372036854775808, 2], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("t.arr_f64", [1e300, -2.5], V.ARRAY, sub_type=V.FLOAT64)
    w.add_tensor("a", np.arange(3 * 2 * 5, dtype=np.float32).reshape(3, 2, 5))
    w.add_tensor("b.weight", (np.arange(2 * 32, dtype=np.float32) / 8).astype(np.float16).reshape(2, 32))
    finish(w)
    print(f"{path}: {os.path.getsize(path)} bytes")


def write_corpus():
    """Tiny valid GGUFs as fuzzing seeds: every block type once, metadata, vocab-only."""
    out = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "fuzz", "corpus", "gguf")
    os.makedirs(out, exist_ok=True)
    types = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K,
             T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL]
    # One file per group of types, one block (row) each, alignment 8 to keep them small.
    for gi, group in enumerate([types[:3], types[3:8], types[8:11], types[11:]]):
        w = gguf.GGUFWriter(os.path.join(out, f"seed_types{gi}.gguf"), arch="llama")
        w.add_custom_alignment(8)
        for t in group:
            bs = GGML_QUANT_SIZES[t][0]
            raw = make_raw(t, 1, max(bs, 4))
            if t in (T.F32, T.F16):
                w.add_tensor(f"t.{t.name.lower()}", raw)
            else:
                w.add_tensor(f"t.{t.name.lower()}", raw, raw_dtype=t)
        finish(w)
    w = gguf.GGUFWriter(os.path.join(out, "seed_vocab.gguf"), arch="llama")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "ab", "<s>"])
    w.add_array("tokenizer.ggml.token_type", [1, 1, 1, 3])
    w.add_array("tokenizer.ggml.merges", ["a b"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_uint32("tokenizer.ggml.bos_token_id", 3)
    finish(w)
    w = gguf.GGUFWriter(os.path.join(out, "seed_meta.gguf"), arch="llama")
    w.add_uint8("a", 1); w.add_int8("b", -1); w.add_uint16("c", 2); w.add_int16("d", -2)
    w.add_int32("e", -3); w.add_float32("f", 0.5); w.add_uint64("g", 4); w.add_int64("h", -4)
    w.add_float64("i", 0.25)
    w.add_key_value("j", [1, 2], V.ARRAY, sub_type=V.UINT16)
    w.add_array("k", [0.5, 1.5])
    w.add_tensor("x", np.arange(6, dtype=np.float32).reshape(2, 3))
    finish(w)
    for name in sorted(os.listdir(out)):
        print(f"{os.path.join(out, name)}: {os.path.getsize(os.path.join(out, name))} bytes")


def main():
    os.makedirs(OUT, exist_ok=True)
    for t in (T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
              T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL):
        write_type(t)
    write_metadata()
    write_corpus()
    print("gguf", gguf.__version__ if hasattr(gguf, "__version__") else "?", "numpy", np.__version__,
          file=sys.stderr)


if __name__ == "__main__":
    main()
