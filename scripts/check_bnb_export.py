#!/usr/bin/env python3
"""Acceptance check of `quanttool convert --format bnb` (run by hand, not in CI; needs
transformers + bitsandbytes + accelerate + torch; runs on the CPU, or unchanged on a CUDA machine).

  python scripts/check_bnb_export.py --model OUT_DIR --ours ours.f32 [--device cpu|cuda]
  python scripts/check_bnb_export.py --model OUT_DIR --golden tests/golden/bnb_moe/M.json --type nf4|fp4

1. transformers loads the folder (its bitsandbytes integration rebuilds Linear4bit modules from
   the stored codes, absmax and quant_state), and bitsandbytes' own dequantize_4bit of every
   Linear4bit must equal quant_map[code] * absmax of the stored tensors bit for bit (what
   quanttool computes from).
2. --ours: it runs the token ids of ours.f32.ids (written by `quanttool logits --out ours.f32`)
   with float32 activations and its logits are compared with ours: max |diff| < 1e-2 and the same
   argmax everywhere.
   --golden (the tiny mixtures of experts, tests/golden/make_bnb_moe_goldens.py): it runs the
   golden's ids through the folder with fp32 compute (fp32_bnb_model) and compares with the logits
   transformers gave for the folder it quantized and saved itself: max |diff| < 1e-5.
Exit code 0 when both pass.
"""
import argparse
import glob
import json
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def use_generic_cpu_dequantize():
    """bitsandbytes 0.50.2's native CPU kernel for dequantize_4bit (backends/cpu/ops.py,
    cdequantize_blockwise_cpu_*) scales a whole row by one absmax when the row is shorter than the
    block (the tiny models' hidden size 32 < 64: every value got absmax[0]); its generic op
    (backends/default/ops.py _dequantize_4bit_compute, what the CUDA kernel computes) scales each
    block of the flattened weight by its own absmax. bitsandbytes.functional.dequantize_4bit is
    routed to the generic op here (fp32_bnb_model's Linear4bit forward and the check call it)."""
    import bitsandbytes as bnb
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.backends.utils import _get_4bit_code

    def dequantize_4bit(A, quant_state=None, *args, **kwargs):
        qs = quant_state
        if A.device.type != "cpu" or qs is None or qs.nested:
            return native(A, quant_state, *args, **kwargs)
        code = _get_4bit_code(qs.quant_type, A.device)
        return _dequantize_4bit_compute(A.view(torch.uint8).reshape(-1), qs.absmax, code, qs.blocksize, qs.shape,
                                        qs.dtype)

    native = bnb.functional.dequantize_4bit
    if not getattr(native, "generic_on_cpu", False):
        dequantize_4bit.generic_on_cpu = True
        bnb.functional.dequantize_4bit = dequantize_4bit


def fp32_bnb_model(folder, device="cpu"):
    """transformers' model of a bitsandbytes folder computing in float32: every float parameter cast
    to float32 and each Linear4bit's compute_dtype float32 (the saved config's compute dtype would
    round activations to it), with bitsandbytes' AVX512-bf16 CPU repacking off (it casts absmax to
    bfloat16, and fails on rows shorter than a block). On the CPU each Linear4bit computes
    x @ dequantize_4bit(W).T with the generic dequantize (use_generic_cpu_dequantize), which is
    quant_map[code] * absmax exactly; matmul_4bit's CPU gemm_4bit has the native kernel's fault."""
    import bitsandbytes as bnb

    use_generic_cpu_dequantize()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, device_map=device)
    for p in model.parameters():
        if p.is_floating_point():
            p.data = p.data.float()
    for mod in model.modules():
        if isinstance(mod, bnb.nn.Linear4bit):
            mod.support_avx512bf16_for_cpu = False
            mod.compute_dtype = torch.float32
            if device == "cpu":  # matmul_4bit's CPU gemm_4bit dequantizes with the native kernel
                mod.forward = generic_forward(mod)
    return model


def generic_forward(mod):
    import bitsandbytes as bnb

    def forward(x):
        w = bnb.functional.dequantize_4bit(mod.weight.data, mod.weight.quant_state).float()
        return torch.nn.functional.linear(x.float(), w, None if mod.bias is None else mod.bias.float())

    return forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ours")
    ap.add_argument("--golden")
    ap.add_argument("--type", choices=("nf4", "fp4"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    if bool(a.ours) == bool(a.golden) or (a.golden and not a.type):
        ap.error("give --ours, or --golden with --type")
    if a.ours:
        ids = [int(x) for x in open(a.ours + ".ids").read().split()]
        want = np.fromfile(a.ours, dtype="<f4").reshape(len(ids), -1)
        use_generic_cpu_dequantize()
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, device_map=a.device)
        tol = 1e-2
    else:
        g = json.load(open(a.golden))
        ids = g["ids"]
        want = np.array(g[a.type]["logits"], dtype=np.float32).reshape(len(ids), -1)
        model = fp32_bnb_model(a.model, a.device)
        tol = 1e-5
    n4 = sum(1 for m in model.modules() if type(m).__name__ == "Linear4bit")
    print(f"transformers loaded {a.model}: {n4} Linear4bit modules")
    import bitsandbytes as bnb
    from safetensors.torch import load_file
    stored = {}
    for f in glob.glob(a.model + "/*.safetensors"):
        stored.update({k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in load_file(f).items()})
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
        # dequantize_4bit returns the quant_state's dtype (the weights' dtype): compare at it.
        mine = torch.from_numpy(mine.reshape(deq.shape)).to(w.quant_state.dtype).float().numpy()
        worst = max(worst, float(np.abs(mine - deq).max()))
    print(f"bitsandbytes dequantize_4bit vs stored codes: max |diff| {worst}")
    with torch.no_grad():
        theirs = model(torch.tensor([ids], device=a.device)).logits[0].float().cpu().numpy()
    diff = np.abs(theirs - want).max()
    agree = (theirs.argmax(-1) == want.argmax(-1)).mean()
    what = "ours" if a.ours else "transformers' own bnb folder"
    print(f"{what} vs transformers+bitsandbytes on {a.model}: max |diff| {diff:.3e}, argmax agreement {agree:.3f}")
    ok = diff < tol and agree == 1.0 and n4 > 0 and worst == 0.0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
