#!/usr/bin/env python3
"""Golden vectors for tests/test_schemes.cpp (libquant/schemes), made by the libraries that
define each weight format.

Run:  python3 tests/golden/make_scheme_goldens.py
Made with (pip, CPU only): mlx 0.32.4 + mlx-cpu 0.32.4, bitsandbytes 0.50.2, compressed-tensors
0.20.0, torch 2.15.0, numpy 2.4.6, safetensors (writer). The script prints the versions it ran
with; if they change, rerun it and check that the C++ test still passes.

Files (safetensors, written with safetensors.torch.save_file):
  affine.safetensors  MLX affine: mlx.core.quantize on the CPU device (fast::Quantize::eval_cpu),
                      every bits {2,3,4,5,6,8} x group {32,64,128} for fp32 and bf16 input, plus a
                      few fp16 pairs. Keys: w.<dt> (input), b<B>g<G>.<dt>.{wq,scales,biases,deq};
                      deq = mlx.core.dequantize (its output dtype = the scales' dtype).
  bnb.safetensors     bitsandbytes.functional.quantize_4bit on CPU tensors (the "default" backend
                      kernel: bitsandbytes 0.50.2 registers no CPU-specific quantize_4bit), with
                      compress_statistics=False; deq = functional.dequantize_4bit on CPU.
                      Keys: in.<name> (input), <nf4|fp4>.b<64|128>.<name>.{packed,absmax,deq}.
  int.safetensors     int8 / int4 (Cider convention, docs/spec/int8-w8a8.md): a numpy
                      restatement of cider.ops.quantize_weight_int8 / pack_weight_int4 and
                      cider.nn._symmetric_quantize_pergroup (no Cider package runs off Apple M5);
                      the per-token activation quantizer (int8-w8a8.md, Cider's
                      w8a8_quantize.metal formula with round-half-to-even); and int8 in
                      compressed-tensors' convention made by the package itself
                      (calculate_qparams + IntQuantizationCompressor.compress / decompress of the
                      W8A8 preset, strategy channel or group).
"""
import os
import sys

import numpy as np
import torch
import mlx.core as mx
import bitsandbytes
import bitsandbytes.functional as bnbF
import compressed_tensors
from compressed_tensors.compressors.naive_quantized.base import IntQuantizationCompressor
from compressed_tensors.quantization import preset_name_to_scheme, QuantizationArgs
from compressed_tensors.quantization.utils.helpers import calculate_qparams
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemes")
rng = np.random.default_rng(20260823)
mx.set_default_device(mx.cpu)

TORCH_DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
MX_DT = {"f32": mx.float32, "bf16": mx.bfloat16, "f16": mx.float16}


def near_ties(m, denom, count):
    """Values v in (-m, m) just around (k + 1/2)·s, s = f32(m / denom), for which dividing by s and
    multiplying by f32(1/s) round to different integers: they pin down which of the two a
    convention uses (Cider's weights divide; the activation quantizer multiplies)."""
    s = np.float32(np.float32(m) / np.float32(denom))
    inv = np.float32(np.float32(1.0) / s)
    out = []
    while len(out) < count:
        k = int(rng.integers(-int(denom), int(denom)))
        v = np.float32((k + 0.5) * float(s))
        for step in range(-3, 4):
            c = v
            for _ in range(abs(step)):
                c = np.nextafter(c, np.float32(np.sign(step) * np.inf), dtype=np.float32)
            if abs(c) < m and np.rint(c / s) != np.rint(c * inv):
                out.append(c)
                break
    return np.array(out, np.float32)


def weights(rows=7, cols=256):
    """Rows with different magnitudes plus groups that hit every branch of the formats."""
    w = np.zeros((rows, cols), np.float32)
    # Row 0: max |w| = 0.05 in every 64-column group (so per channel, g64 and g128 share the
    # scale), with values where w/s and w·(1/s) round apart for int8 (s = m/127), int4 (m/7)
    # and compressed-tensors' fp32 int8 (m/127.5).
    w[0] = np.clip(rng.standard_normal(cols) * 0.02, -0.049, 0.049)
    w[0, ::64] = 0.05
    ties = np.concatenate([near_ties(0.05, 127.0, 16), near_ties(0.05, 7.0, 16),
                           near_ties(0.05, 127.5, 16)])
    slots = [i for i in range(cols) if i % 64 != 0][:len(ties) * 5:5]
    w[0, slots] = ties
    w[1] = rng.standard_normal(cols)
    w[2] = rng.standard_normal(cols) * 300.0
    r = np.empty(cols, np.float32)
    r[0:32] = 0.0                                   # all-zero group
    r[32:64] = 0.37                                 # constant group (w_max == w_min)
    r[64:96] = rng.standard_normal(32) - 3.0        # all negative
    t = rng.standard_normal(32)
    t[3], t[17] = -1.5, 1.5                         # |min| == |max| tie (MLX picks w_max)
    r[96:128] = np.clip(t, -1.5, 1.5)
    r[128:160] = rng.standard_normal(32) * 1e-8     # tiny: the 1e-7 eps floor of MLX
    r[160:192] = np.resize(np.arange(-4, 5) * 0.25, 32)  # grid values: rounding ties
    r[192:224] = rng.standard_normal(32) * 0.01
    r[200] = 50.0                                   # one outlier
    r[224:256] = rng.uniform(1.0, 2.0, 32)          # all positive
    r[5] = -0.0
    w[3] = r
    # Row 4: multiples of 1/16 in [-1, 1] (many exact halves once scaled), with absmax exactly
    # 1.0 in its first 128 values and the nf4 / fp4 decision midpoints placed exactly there, so
    # bitsandbytes' tie rule (a midpoint goes to the lower code) is exercised.
    w[4] = rng.integers(-16, 17, cols) / 16.0
    w[4, 0] = 1.0
    nf4 = bnbF.get_4bit_type("nf4", device="cpu")
    fp4s = torch.sort(bnbF.get_4bit_type("fp4", device="cpu")).values
    mids = torch.cat([(nf4[:-1] + nf4[1:]) / 2, (fp4s[:-1] + fp4s[1:]) / 2]).numpy()
    w[4, 1:1 + len(mids)] = mids
    w[4, 40:44] = [0.0, -0.0, 1e-4, -1e-4]          # fp4's +0/-0 buckets
    w[5] = rng.standard_t(2.0, cols).astype(np.float32)  # heavy tails
    w[6] = 0.0                                      # all-zero row (scale fallbacks)
    return w


def to_dt(a32, dt):
    return torch.from_numpy(np.ascontiguousarray(a32)).to(TORCH_DT[dt])


def mx_to_torch(a):
    if a.dtype == mx.bfloat16:
        return torch.from_numpy(np.array(a.view(mx.uint16))).view(torch.bfloat16)
    return torch.from_numpy(np.array(a))


def torch_to_mx(t):
    if t.dtype == torch.bfloat16:
        return mx.array(t.view(torch.uint16).numpy()).view(mx.bfloat16)
    return mx.array(t.numpy())


def make_affine(w32):
    out = {}
    for dt in ("f32", "bf16", "f16"):
        wt = to_dt(w32, dt)
        out[f"w.{dt}"] = wt
        wm = torch_to_mx(wt)
        for bits in (2, 3, 4, 5, 6, 8):
            for g in (32, 64, 128):
                if dt == "f16" and not (g == 64 and bits in (3, 4, 8)):
                    continue
                wq, s, b = mx.quantize(wm, group_size=g, bits=bits, mode="affine")
                deq = mx.dequantize(wq, s, b, group_size=g, bits=bits, mode="affine")
                mx.eval(wq, s, b, deq)
                assert s.dtype == MX_DT[dt] and deq.dtype == MX_DT[dt]
                k = f"b{bits}g{g}.{dt}"
                out[k + ".wq"] = mx_to_torch(wq)
                out[k + ".scales"] = mx_to_torch(s)
                out[k + ".biases"] = mx_to_torch(b)
                out[k + ".deq"] = mx_to_torch(deq)
    return out


def make_bnb(w32):
    inputs = {
        "main": to_dt(w32, "f32"),
        "mainbf16": to_dt(w32, "bf16"),
        "ragged": torch.from_numpy(rng.standard_normal((5, 40)).astype(np.float32)),
        "odd": torch.from_numpy(rng.standard_normal((3, 45)).astype(np.float32)),
    }
    inputs["odd"].view(-1)[-7:] = 0.0  # zero tail block (64): bnb stores absmax 1e-38 there
    out = {}
    for name, a in inputs.items():
        out[f"in.{name}"] = a
        for qt in ("nf4", "fp4"):
            for bs in (64, 128):
                k = f"{qt}.b{bs}.{name}"
                packed, st = bnbF.quantize_4bit(a, blocksize=bs, quant_type=qt,
                                                compress_statistics=False)
                deq = bnbF.dequantize_4bit(packed, st)
                assert packed.dtype == torch.uint8 and st.absmax.dtype == torch.float32
                assert deq.dtype == a.dtype
                # Guard against bitsandbytes 0.50.2's CPU dequantize bug: its AVX-512 path
                # indexes absmax per row (row_len // blocksize per row), wrong whenever the row
                # length is not a multiple of blocksize (e.g. 576-wide rows, blocksize 128).
                # None of these shapes reaches it; check against table[code] * absmax.
                q = torch.stack([packed.flatten() >> 4, packed.flatten() & 15], 1).flatten()
                n = a.numel()
                manual = st.code[q[:n].long()] * st.absmax.repeat_interleave(bs)[:n]
                assert torch.equal(deq.flatten().float(), manual.to(a.dtype).float()), k
                out[k + ".packed"] = packed.contiguous()
                out[k + ".absmax"] = st.absmax.contiguous()
                out[k + ".deq"] = deq.contiguous()
    return out


# --- Cider convention (cider/ops.py, cider/nn.py), restated in numpy ---------------------------
def cider_int8(w, group):
    """cider.ops.quantize_weight_int8 (group 0) / cider.nn._symmetric_quantize_pergroup."""
    w = w.astype(np.float32)
    n, k = w.shape
    g = k if group == 0 else group
    wr = w.reshape(n, k // g, g)
    scale = np.max(np.abs(wr), axis=2) / 127.0        # float32 / python float -> float32
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    q = np.clip(np.round(wr / scale[:, :, None]), -128, 127).astype(np.int8).reshape(n, k)
    return q, scale                                    # scale [n, k/g] (Cider keeps [n] or [k/g, n])


def cider_int4(w, group, zero_point=8):
    """cider.ops.pack_weight_int4 takes W as [K, N] and packs pairs along K (high nibble = even
    k); we call it on Wᵀ and transpose the bytes back to our [N, K/2] layout. Per-group (128 along
    K) is the same formula with one scale per group."""
    wt = w.T.astype(np.float32)                        # [K, N]
    K, N = wt.shape
    g = K if group == 0 else group
    wr = wt.reshape(K // g, g, N)
    scale = np.max(np.abs(wr), axis=1) / 7.0           # [K/g, N]
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    u = np.clip(np.round(wr / scale[:, None, :]) + zero_point, 0, 15).astype(np.uint8).reshape(K, N)
    packed = (u[0::2, :] << 4) | u[1::2, :]            # [K/2, N], Cider's layout
    return np.ascontiguousarray(packed.T), np.ascontiguousarray(scale.T)  # ours: [N, K/2], [N, K/g]


def act_int8(x):
    """Per-token dynamic symmetric int8 (docs/spec/int8-w8a8.md): s = absmax/127 (1 for a zero row),
    q = clamp(rint(x * (1/s)), -128, 127) with round-half-to-even (torch.round / cvtps2dq)."""
    x = x.astype(np.float32)
    s = (np.max(np.abs(x), axis=1) / np.float32(127.0)).astype(np.float32)
    s = np.where(s == 0, np.float32(1.0), s).astype(np.float32)
    inv = (np.float32(1.0) / s).astype(np.float32)
    q = np.clip(np.rint(x * inv[:, None]), -128, 127).astype(np.int8)
    return q, s


def make_int(w32):
    out = {"w.f32": to_dt(w32, "f32"), "w.bf16": to_dt(w32, "bf16")}
    for dt in ("f32", "bf16"):
        wv = out[f"w.{dt}"].float().numpy()
        for g in (0, 64, 128):
            q, s = cider_int8(wv, g)
            k = f"int8.g{g}.{dt}"
            out[k + ".q"] = torch.from_numpy(q)
            out[k + ".scale"] = torch.from_numpy(s)
            out[k + ".deq"] = torch.from_numpy(
                (q.reshape(q.shape[0], s.shape[1], -1).astype(np.float32) * s[:, :, None])
                .reshape(q.shape))
        for g in (0, 128):
            p, s = cider_int4(wv, g)
            k = f"int4.g{g}.{dt}"
            out[k + ".packed"] = torch.from_numpy(p)
            out[k + ".scale"] = torch.from_numpy(s)
            u = np.empty((p.shape[0], p.shape[1] * 2), np.int32)
            u[:, 0::2] = p >> 4
            u[:, 1::2] = p & 15
            out[k + ".deq"] = torch.from_numpy(
                ((u - 8).reshape(u.shape[0], s.shape[1], -1).astype(np.float32) * s[:, :, None])
                .reshape(u.shape))
    # compressed-tensors' own int8 (W8A8 preset): min/max per channel or group as the minmax
    # observer reduces them, calculate_qparams, then the int-quantized compressor.
    for dt, g in (("f32", 0), ("bf16", 0), ("bf16", 128), ("f32", 64)):
        wt = out[f"w.{dt}"]
        scheme = preset_name_to_scheme("W8A8", ["Linear"])
        if g:
            scheme.weights = QuantizationArgs(num_bits=8, type="int", symmetric=True,
                                              strategy="group", group_size=g)
            wr = wt.reshape(wt.shape[0], -1, g)
            mn, mxv = wr.amin(dim=2), wr.amax(dim=2)
        else:
            mn, mxv = wt.amin(dim=1, keepdim=True), wt.amax(dim=1, keepdim=True)
        scale, zp = calculate_qparams(mn, mxv, scheme.weights)
        assert scale.dtype == wt.dtype
        comp = IntQuantizationCompressor.compress(
            {"weight": wt, "weight_scale": scale, "weight_zero_point": zp}, scheme)
        assert "weight_zero_point" not in comp and comp["weight"].dtype == torch.int8
        deq = IntQuantizationCompressor.decompress(dict(comp), scheme)["weight"]
        k = f"ct.g{g}.{dt}"
        out[k + ".q"] = comp["weight"].contiguous()
        out[k + ".scale"] = comp["weight_scale"].contiguous()
        out[k + ".deq"] = deq.contiguous()
    # activations: 5 tokens, one all zero, one with exact .5 ties after scaling
    x = rng.standard_normal((5, 256)).astype(np.float32)
    x[1] *= 40.0
    x[2] = 0.0
    x[3] = rng.integers(-254, 255, 256) / 2.0       # absmax 127 -> s = 1, x = k + 0.5 ties
    x[3, 0] = 127.0
    x[4] = rng.standard_normal(256).astype(np.float32) * 1e-3
    x[0] = np.clip(x[0], -2.9, 2.9)                 # token 0: absmax 3 and ties that tell
    x[0, 0] = 3.0                                   # x·(1/s) from x/s
    x[0, 1:41] = near_ties(3.0, 127.0, 40)
    q, s = act_int8(x)
    out["act.x"] = torch.from_numpy(x)
    out["act.q"] = torch.from_numpy(q)
    out["act.scale"] = torch.from_numpy(s)
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    w32 = weights()
    for name, fn in (("affine", make_affine), ("bnb", make_bnb), ("int", make_int)):
        tensors = {k: v.contiguous() for k, v in fn(w32).items()}
        path = os.path.join(OUT, name + ".safetensors")
        save_file(tensors, path, metadata={"made_by": versions()})
        print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def versions():
    import importlib.metadata as md
    return ", ".join(f"{p} {md.version(p)}" for p in
                     ("mlx", "mlx-cpu", "bitsandbytes", "compressed-tensors", "torch", "numpy"))


if __name__ == "__main__":
    print(versions(), file=sys.stderr)
    main()
