#!/usr/bin/env python3
"""Acceptance check of `quanttool convert --format mlx` (run by hand, not in CI; needs mlx_lm).

  python scripts/check_mlx_export.py --model OUT_DIR --text wiki.test.raw [--tokens 64]
      [--save mlx_logits.npy] [--ours ours.f32 [--ids ours.f32.ids]] [--source HF_DIR] [--f32]

1. mlx_lm.load(OUT_DIR) must succeed (its loader rebuilds QuantizedLinear/QuantizedEmbedding
   from config.json "quantization" and the stored scales), and its logits on the first N tokens
   are saved (--save).
2. --ours: our logits (`quanttool logits --out FILE`: raw fp32 [N, vocab], token ids in FILE.ids,
   or a .npy) are compared: max |diff| must be < 1e-2. The token ids of FILE.ids are used for
   mlx too, so both sides see the same tokens.
3. --source: an unquantized HF folder of the same weights (`quanttool convert --format hf
   --dtype bf16`): every quantized module's stored weight/scales/biases must equal what
   mx.quantize computes from the source weight (bit-exact), and mx.dequantize of the stored
   tensors must equal mx.dequantize of mlx's own (i.e. mlx's dequantized weights are ours). A
   mixture of experts' stacked module (switch_mlp) against its experts' source weights stacked.
Exit code 0 when every check that ran passed.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np


# A mixture of experts: mlx_lm's switch_mlp module stacks the experts' Linears of the source
# (models/qwen3_moe.py, mixtral.py sanitize), whose HF projection names these are.
EXPERT_NAMES = {"mlp.switch_mlp": ("mlp.experts", {"gate_proj": "gate_proj", "up_proj": "up_proj",
                                                    "down_proj": "down_proj"}),
                "block_sparse_moe.switch_mlp": ("block_sparse_moe.experts", {"gate_proj": "w1", "up_proj": "w3",
                                                                             "down_proj": "w2"})}


def stacked_experts(src, m):
    import mlx.core as mx
    for switch, (experts, proj) in EXPERT_NAMES.items():
        head, _, p = m.rpartition(".")
        if head.endswith(switch):
            pre = head[: -len(switch)] + experts
            n = sum(1 for k in src if k.startswith(pre + ".") and k.endswith("." + proj[p] + ".weight"))
            return mx.stack([src[f"{pre}.{e}.{proj[p]}.weight"] for e in range(n)])
    raise KeyError(m)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--save")
    ap.add_argument("--ours")
    ap.add_argument("--ids")
    ap.add_argument("--source")
    ap.add_argument("--f32", action="store_true",
                    help="run mlx_lm in float32 (bf16 scales/biases widen exactly); a bf16 forward alone "
                         "differs from an f32 one by ~1 in the logits, far above the 1e-2 bar")
    a = ap.parse_args()

    import mlx.core as mx
    from mlx_lm import load

    model, tok = load(a.model)
    if a.f32:
        model.set_dtype(mx.float32)
    ok = True
    ids = None
    ids_path = a.ids or (a.ours + ".ids" if a.ours and Path(a.ours + ".ids").exists() else None)
    if ids_path:
        ids = [int(x) for x in Path(ids_path).read_text().split()][: a.tokens]
    elif a.text:
        ids = tok.encode(Path(a.text).read_text(encoding="utf-8"))[: a.tokens]
    if ids is not None:
        logits = model(mx.array([ids]))[0].astype(mx.float32)
        mx.eval(logits)
        theirs = np.array(logits)
        print(f"mlx_lm logits: {theirs.shape}, first token argmax {int(theirs[0].argmax())}")
        if a.save:
            np.save(a.save, theirs)
            print(f"saved {a.save}")
        if a.ours:
            ours = np.load(a.ours) if a.ours.endswith(".npy") else np.fromfile(a.ours, dtype=np.float32)
            ours = ours.reshape(theirs.shape)
            d = float(np.abs(ours - theirs).max())
            agree = float((ours.argmax(-1) == theirs.argmax(-1)).mean())
            print(f"ours vs mlx_lm: max |diff| {d:.3e}, argmax agreement {agree:.3f}")
            ok &= d < 1e-2

    if a.source:
        from safetensors.numpy import load_file as _unused  # noqa: F401  (numpy has no bf16)
        cfg = json.loads((Path(a.model) / "config.json").read_text())
        q = cfg["quantization"]
        src = {}
        for f in sorted(Path(a.source).glob("*.safetensors")):
            src.update(mx.load(str(f)))
        stored = {}
        for f in sorted(Path(a.model).glob("*.safetensors")):
            stored.update(mx.load(str(f)))
        n = bad = 0
        for name in sorted(k for k in stored if k.endswith(".scales")):
            m = name[: -len(".scales")]
            p = q.get(m, q)
            gs, bits = p["group_size"], p["bits"]
            w = src[m + ".weight"] if m + ".weight" in src else stacked_experts(src, m)
            qw, s, b = mx.quantize(w, group_size=gs, bits=bits)
            same = all(
                bool(mx.array_equal(x, stored[m + suf]).item())
                for x, suf in ((qw, ".weight"), (s, ".scales"), (b, ".biases"))
            )
            deq_ours = mx.dequantize(stored[m + ".weight"], stored[m + ".scales"], stored[m + ".biases"], gs, bits)
            same &= bool(mx.array_equal(deq_ours, mx.dequantize(qw, s, b, gs, bits)).item())
            n += 1
            if not same:
                bad += 1
                print(f"MISMATCH {m} (bits {bits}, group {gs})")
        print(f"packed tensors equal to mx.quantize of the source: {n - bad}/{n} modules")
        ok &= bad == 0 and n > 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
