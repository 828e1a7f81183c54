#!/usr/bin/env python3
"""Acceptance check of `quanttool convert --format bnb` (run by hand, not in CI; needs
transformers + bitsandbytes + torch; runs on the CPU, or unchanged on a CUDA machine).

  python scripts/check_bnb_export.py --model OUT_DIR --ours ours.f32 [--device cpu|cuda]

1. transformers loads the folder (its bitsandbytes integration rebuilds Linear4bit modules from
   the stored codes, absmax and quant_state), and bitsandbytes' own dequantize_4bit of every
   Linear4bit must equal quant_map[code] * absmax of the stored tensors bit for bit (what
   quanttool computes from).
2. It runs the token ids of ours.f32.ids (written by `quanttool logits --out ours.f32`) with
   float32 activations and its logits are compared with ours: max |diff| < 1e-2 and the same
   argmax everywhere. (bitsandbytes' CPU Linear4bit forward is itself ~0.3% off
   x @ dequantize_4bit(W).T, so run this step on CUDA.)
Exit code 0 when both pass.
"""
import glob
import argparse
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    ids = [int(x) for x in open(a.ours + ".ids").read().split()]
    ours = np.fromfile(a.ours, dtype="<f4").reshape(len(ids), -1)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, device_map=a.device)
    n4 = sum(1 for m in model.modules() if type(m).__name__ == "Linear4bit")
    print(f"transformers loaded {a.model}: {n4} Linear4bit modules")
    import bitsandbytes as bnb
    from safetensors.numpy import load_file
    stored = {}
    for f in glob.glob(a.model + "/*.safetensors"):
        stored.update(load_file(f))
    worst = 0.0
    for name, mod in model.named_modules():
        if type(mod).__name__ != "Linear4bit":
            continue
        w = mod.weight
        deq = bnb.functional.dequantize_4bit(w.data, w.quant_state).float().cpu().numpy()
        codes = stored[name + ".weight"].reshape(-1)
        c = np.stack([codes >> 4, codes & 15], 1).reshape(-1)[: deq.size]
        bs = w.quant_state.blocksize
        mine = stored[name + ".weight.quant_map"][c] * np.repeat(stored[name + ".weight.absmax"], bs)[: deq.size]
        worst = max(worst, float(np.abs(mine.reshape(deq.shape) - deq).max()))
    print(f"bitsandbytes dequantize_4bit vs stored codes: max |diff| {worst}")
    with torch.no_grad():
        theirs = model(torch.tensor([ids], device=a.device)).logits[0].float().cpu().numpy()
    diff = np.abs(theirs - ours).max()
    agree = (theirs.argmax(-1) == ours.argmax(-1)).mean()
    print(f"ours vs transformers+bitsandbytes: max |diff| {diff:.3e}, argmax agreement {agree:.3f}")
    ok = diff < 1e-2 and agree == 1.0 and n4 > 0 and worst == 0.0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
