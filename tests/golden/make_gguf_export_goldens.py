#!/usr/bin/env python3
"""Goldens for the GGUF writer (tests/test_gguf_export.cpp), made by the `gguf` PyPI package
(gguf-py, the library that defines the format) and numpy only.

Run:  LLAMA_QUANTIZE=/path/llama-quantize python3 tests/golden/make_gguf_export_goldens.py   (gguf 0.19.0, numpy)

tests/golden/gguf_export/rtn.gguf
    "x" (F32 [8, 256]): random rows of several scales plus hand-made blocks (all zero, one
    non-zero, exact .5 ties for every type, a negative absmax, constant); and for each type T of
    f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 a tensor named T holding gguf.quants.quantize(x, T).
    gguf-py's quantizers restate ggml-quants.c's quantize_row_*_ref (what llama-quantize runs for
    these types without an imatrix), so our bytes must equal these exactly.
    "iq4_nl_rtn": IQ4_NL by the round-to-nearest rule (d = signed absmax / -127 stored as f16, every
    element coded to the nearest of gguf-py's IQ4_NL.kvalues): gguf-py has no IQ4_NL quantizer, and
    ours is a scale search, so the test asserts that our error is no larger than this one's per block.
    "imp" (F32 [256]): per-column importance (log-normal, a few channels 100x heavier, as act-stats
    mean squares are): `--imatrix` quantization must have an importance-weighted error no larger
    than the reference blocks' above, per block.

tests/golden/gguf_export/<model>.<type>.gguf
    What convert_hf_to_gguf.py would write for the tiny test models tests/golden/logits/<model>
    (their bf16 safetensors read as f32), with gguf.GGUFWriter: the architecture keys, llama's
    Q/K permutation (LlamaModel.permute, restated below), llama3's rope_freqs.weight, 1-D
    tensors F32, 2-D tensors quantized by gguf.quants.quantize. Our `convert --format gguf` of
    the same folder must give the same tensors (names, shapes, types, bytes) and the same values
    for these keys. (general.name is the folder's name, as our convert writes it.)

tests/golden/gguf_export/kq.f32.gguf, kq.<type>.gguf (type q4_k, q5_k, q6_k, q2_k, q3_k, iq4_xs)
    K-quants: gguf-py has no quantizer for them, so the reference is llama.cpp's own
    `llama-quantize --pure kq.f32.gguf kq.<type>.gguf Q4_K|Q5_K|Q6_K|Q2_K|Q3_K|IQ4_XS` (ggml-quants.c
    quantize_row_q{2,3,4,5,6}_K_ref, quantize_iq4_xs; IQ4_XS's fallback IQ4_NL is quantize_iq4_nl); give the binary as LLAMA_QUANTIZE=/path/to/llama-quantize, else
    these files are left as they are). kq.f32.gguf is a bare 1-layer llama written here with
    gguf.GGUFWriter: hidden 256 (token_embd, attn_q/k/v, ffn_gate/up, output: rows of 256, K-quantized)
    and a head size / intermediate size of 32 (attn_output, ffn_down: rows of 32, llama.cpp's
    fallback Q5_0 / Q5_1 / Q8_0 / Q4_0), random values of several scales plus hand-made super-blocks in
    token_embd (all zero, constant positive and negative, one non-zero, a zero sub-block, integer
    values, tiny values). Our `convert --format gguf --gguf-type <type>` of kq.f32.gguf must give
    the same tensors (names, shapes, types, bytes).
    kq.<mix>.gguf for every mix of MIXES below: `llama-quantize kq.f32.gguf ... Q4_K_M|Q2_K|IQ4_XS|...`
    (llama.cpp's per-tensor mixes: e.g. for Q4_K_M output and, in this 1-layer model, attn_v and
    ffn_down in Q6_K, ffn_down's 32-column rows falling back to Q8_0); `--gguf-type <mix>` must give
    the same tensors. kq.q4_k_m.tensor-type.gguf: Q4_K_M with TENSOR_TYPE_ARGS (llama-quantize
    --tensor-type); `--tensor-type` with the same arguments must give the same tensors.

tests/golden/gguf_export/smollm2.<mix>.types.txt (every mix of MIXES but q6_k_mix), and
smollm2.q4_k_m.tensor-type.types.txt (Q4_K_M with SMOL_TENSOR_TYPE_ARGS)
    The type llama-quantize's mix gives each tensor of SmolLM2-135M (30 layers,
    tied embedding, 576 columns: the layer rule and the fallbacks at scale), one "name TYPE" a line:
    `llama-quantize --allow-requantize models/SmolLM2-135M-Instruct.Q4_1.gguf OUT Q4_K_M` (the
    types do not depend on the values), read back with gguf.GGUFReader. Needs LLAMA_QUANTIZE and
    the model file; left as they are otherwise.
"""
import json
import math
import os
import struct
import subprocess

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gguf_export")
rng = np.random.default_rng(20261125)

TYPES = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1,
         "q5_0": T.Q5_0, "q5_1": T.Q5_1}
# llama.cpp's llama_ftype of each (general.file_type).
FTYPE = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9}


def add_quantized(w, tensor_name, x, name):
    """gguf.quants.quantize gives f16 as a float16 array (GGUFWriter types it itself), the other
    types as uint8 block bytes (raw_dtype tells the writer the type and the element shape)."""
    q = gguf.quants.quantize(x.astype(np.float32), TYPES[name])
    if name == "f16":
        w.add_tensor(tensor_name, q)
    else:
        w.add_tensor(tensor_name, q, raw_dtype=TYPES[name])


def rtn_input():
    x = (rng.standard_normal((8, 256)) * rng.choice([1e-3, 0.02, 1.0, 30.0], (8, 1))).astype(np.float32)
    b = x.reshape(-1, 32)  # blocks of 32 (a view)
    b[0] = 0.0
    b[1] = 0.0
    b[1, 5] = -0.75
    # Exact ties: q8_0 with absmax 127 -> id = 1, codes k + 0.5 round away from zero.
    b[2] = np.arange(32, dtype=np.float32) - 15.5
    b[2, 0] = 127.0
    # q4_0 / q5_0: max -8 / -16 -> id = 1: x + 8.5 / 16.5 lands on .0 boundaries and halves.
    b[3] = np.linspace(-8, 7.5, 32, dtype=np.float32)
    b[4] = np.linspace(-16, 15.5, 32, dtype=np.float32)
    # q4_1 / q5_1: min 0, max 15 / 31 -> d = 1: (x - min) + 0.5 ties.
    b[5] = np.linspace(0, 15, 32, dtype=np.float32)
    b[6] = np.linspace(0, 31, 32, dtype=np.float32)
    b[7] = 3.25  # constant block: q4_1's d = 0
    b[8] = -b[8] - 5.0  # negative absmax
    b[9, 3] = 1e-8  # tiny values, subnormal halves
    b[9] *= 1e-4
    return x


def write_rtn():
    x = rtn_input()
    w = gguf.GGUFWriter(os.path.join(OUT, "rtn.gguf"), arch="test")
    w.add_tensor("x", x)
    for name in ("f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"):
        add_quantized(w, name, x, name)
    w.add_tensor("iq4_nl_rtn", iq4_nl_rtn(x), raw_dtype=T.IQ4_NL)
    imp = np.exp(rng.standard_normal(256)).astype(np.float32)
    imp[rng.choice(256, 8, replace=False)] *= 100
    w.add_tensor("imp", imp)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def iq4_nl_rtn(x):
    kv = np.array(gguf.quants.IQ4_NL.kvalues, dtype=np.float32)
    b = x.reshape(-1, 32).astype(np.float32)
    imax = np.abs(b).argmax(axis=-1, keepdims=True)
    d = (np.take_along_axis(b, imax, axis=-1) / np.float32(-127)).astype(np.float16)
    d32 = d.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(d32 == 0, 0, b / d32)
    q = np.abs(v[..., None] - kv).argmin(axis=-1).astype(np.uint8)  # first (lower) on ties
    qs = q[:, :16] | (q[:, 16:] << np.uint8(4))
    out = np.concatenate([d.view(np.uint8), qs], axis=-1)
    return out.reshape(x.shape[0], -1)


# ------------------------------------------------------------------------------ tiny models

def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in head.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = np.frombuffer(data[a:b], dtype=np.uint8)
        if info["dtype"] == "BF16":
            v = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F32":
            v = raw.view(np.float32)
        elif info["dtype"] == "F16":
            v = raw.view(np.float16).astype(np.float32)
        else:
            raise SystemExit(f"{path}: {name}: dtype {info['dtype']}")
        out[name] = v.reshape(info["shape"]).copy()
    return out


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def name_map(arch, n_blocks):
    """gguf-py's own HF -> GGUF tensor names (gguf/tensor_mapping.py, what convert_hf_to_gguf.py uses)."""
    m = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], n_blocks)
    return lambda hf: m.get_name(hf, try_suffixes=(".weight", ".bias"))


def llama3_factors(cfg, dim):
    """LlamaModel.generate_extra_tensors, in float64 (convert_hf_to_gguf.py computes freqs in
    torch float32; the test allows the last-bit difference this makes)."""
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    base = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    factor, lo, hi = rp.get("factor", 8.0), rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
    old = rp.get("original_max_position_embeddings", 8192)
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / base ** (i / dim)
        wavelen = 2 * math.pi / freq
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            s = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def write_model(model, tname):
    d = os.path.join(HERE, "logits", model)
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    mt = cfg["model_type"]
    arch = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}[mt]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or hidden // heads
    rp = cfg.get("rope_parameters") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))

    w = gguf.GGUFWriter(os.path.join(OUT, f"{model}.{tname}.gguf"), arch=arch)
    w.add_name(model)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(hidden)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if head_dim != hidden // heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_file_type(FTYPE[tname])
    if tname not in ("f32", "f16", "bf16"):
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    if rp.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_factors(cfg, head_dim))
    gguf_name = name_map(arch, cfg["num_hidden_layers"])
    for hf, v in tensors.items():
        if hf == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        if arch == "llama" and hf.endswith("self_attn.q_proj.weight"):
            v = permute(v, heads, heads)
        if arch == "llama" and hf.endswith("self_attn.k_proj.weight"):
            v = permute(v, heads, kv)
        name = gguf_name(hf)
        if v.ndim == 1 or tname == "f32":
            w.add_tensor(name, v.astype(np.float32))
        else:
            add_quantized(w, name, v, tname)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------------ K-quants

def kq_embd(rows):
    x = (rng.standard_normal((rows, 256)) * rng.choice([1e-3, 0.02, 1.0, 30.0], (rows, 1))).astype(np.float32)
    x[0] = 0.0                      # all zero: d = dmin = 0
    x[1] = 3.25                     # constant positive (min clamped to 0)
    x[2] = -0.5                     # constant negative
    x[3] = 0.0
    x[3, 77] = -0.75                # one non-zero
    x[4, 32:64] = 0.0               # a zero sub-block (scale 0: its codes are skipped)
    x[5] = np.tile(np.arange(-8, 8, dtype=np.float32), 16)  # integer values
    x[6] *= 1e-6                    # tiny values
    x[7] = np.abs(x[7]) + 1.0       # all positive, far from 0
    return x


def write_kquants():
    lq = os.environ.get("LLAMA_QUANTIZE")
    if not lq:
        print("LLAMA_QUANTIZE not set: kq.*.gguf left as they are")
        return
    n_embd, head, ff, vocab = 256, 32, 32, 32
    src = os.path.join(OUT, "kq.f32.gguf")
    w = gguf.GGUFWriter(src, arch="llama")
    w.add_name("kq")
    w.add_vocab_size(vocab)
    w.add_context_length(128)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(ff)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_rope_dimension_count(head)
    w.add_file_type(0)

    def rnd(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    w.add_tensor("token_embd.weight", kq_embd(vocab))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("blk.0.attn_q.weight", rnd(head, n_embd))
    w.add_tensor("blk.0.attn_k.weight", rnd(head, n_embd))
    w.add_tensor("blk.0.attn_v.weight", rnd(head, n_embd))
    w.add_tensor("blk.0.attn_output.weight", rnd(n_embd, head))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("blk.0.ffn_gate.weight", rnd(ff, n_embd))
    w.add_tensor("blk.0.ffn_up.weight", rnd(ff, n_embd))
    w.add_tensor("blk.0.ffn_down.weight", rnd(n_embd, ff))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", rnd(vocab, n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for t in ("q4_k", "q5_k", "q6_k", "q2_k", "q3_k", "iq4_xs"):
        subprocess.run([lq, "--pure", src, os.path.join(OUT, f"kq.{t}.gguf"), t.upper(), "1"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for t in MIXES:
        subprocess.run([lq, src, os.path.join(OUT, f"kq.{t}.gguf"), MIXES[t], "1"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([lq] + TENSOR_TYPE_ARGS + [src, os.path.join(OUT, "kq.q4_k_m.tensor-type.gguf"), "Q4_K_M", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    model = os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        print("models/SmolLM2-135M-Instruct.Q4_1.gguf missing: smollm2.*.types.txt left as they are")
        return
    tmp = os.path.join(OUT, "smollm2.tmp.gguf")
    runs = [(t, [MIXES[t]]) for t in MIXES if t not in KQ_ONLY]
    runs.append(("q4_k_m.tensor-type", SMOL_TENSOR_TYPE_ARGS + ["Q4_K_M"]))
    for t, args in runs:
        subprocess.run([lq, "--allow-requantize"] + args[:-1] + [model, tmp, args[-1], "2"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = gguf.GGUFReader(tmp)
        with open(os.path.join(OUT, f"smollm2.{t}.types.txt"), "w") as f:
            for ti in r.tensors:
                f.write(f"{ti.name} {ti.tensor_type.name}\n")
        del r
        os.remove(tmp)


# Our --gguf-type name -> llama-quantize's name of the same mix (its Q2_K, Q6_K and IQ4_XS are
# mixes; ours of those names are --pure).
MIXES = {"q4_k_m": "Q4_K_M", "q5_k_m": "Q5_K_M", "q3_k_m": "Q3_K_M", "q2_k_mix": "Q2_K", "q3_k_s": "Q3_K_S",
         "q3_k_l": "Q3_K_L", "q4_k_s": "Q4_K_S", "q5_k_s": "Q5_K_S", "q6_k_mix": "Q6_K", "iq4_xs_mix": "IQ4_XS"}
# Mixes whose SmolLM2 type list is the plain type's (nothing to learn from it).
KQ_ONLY = {"q6_k_mix"}
# --tensor-type on the bare llama: a pattern per kind, the first match winning.
TENSOR_TYPE_ARGS = ["--tensor-type", "attn_q=q8_0", "--tensor-type", "FFN_(UP|GATE)=iq4_xs",
                    "--tensor-type", "ffn=q4_0", "--tensor-type", "output\\.weight=q5_k"]
# On SmolLM2: overriding the first four attn_v shifts llama.cpp's attn_v counter, so the Q4_K_M
# layer rule then picks other layers than the layer numbers would.
SMOL_TENSOR_TYPE_ARGS = ["--tensor-type", "blk\\.[0-3]\\.attn_v=q8_0", "--tensor-type", "token_embd=q6_k"]


def main():
    os.makedirs(OUT, exist_ok=True)
    write_rtn()
    for tname in ("f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"):
        write_model("tiny-llama3", tname)
    # tiny-qwen2's hidden size (48) is no multiple of the 32-blocks: float types only (its q8_0
    # export is the bad-shape test).
    write_model("tiny-qwen2", "f16")
    for tname in ("q8_0", "q5_1"):
        write_model("tiny-qwen3", tname)
    write_kquants()
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)))


if __name__ == "__main__":
    main()
