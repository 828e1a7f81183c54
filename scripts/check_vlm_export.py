#!/usr/bin/env python3
"""transformers loads quanttool's output of a vision-language folder (results/compat.md §VLM).

For each tiny VLM of tests/golden/vlm/ (tests/golden/make_vlm_goldens.py) this converts it to hf,
compressed-tensors W8A8 (--scheme int8) and W4A16 (--scheme int4_ct --group-size 32), loads each
output with transformers (AutoModelForImageTextToText, fp32, CPU) and prints: the loading report's
missing / unexpected keys, whether every vision-tower and projector parameter equals the source
model's, whether the vision Linears were left unquantized (compressed-tensors' ignore list), and the
max |Δlogit| on the golden's 16 text tokens against the float golden.

Run: python scripts/check_vlm_export.py --quanttool build/quanttool
     (a venv with torch, transformers 5.24, compressed-tensors)
"""
import argparse
import json
import os
import subprocess
import tempfile

import torch
from transformers import AutoModelForImageTextToText

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VISION = ("visual", "vision_tower", "multi_modal_projector")

ap = argparse.ArgumentParser()
ap.add_argument("--quanttool", required=True)
args = ap.parse_args()
os.environ.setdefault("HF_HUB_OFFLINE", "1")

for name in ("qwen2_5_vl", "qwen3_vl", "gemma3_vl"):
    src = os.path.join(ROOT, "tests", "golden", "vlm", "tiny-" + name)
    g = json.load(open(os.path.join(src, "logits.json")))
    ids = torch.tensor(g["ids"])[None]
    ref = AutoModelForImageTextToText.from_pretrained(src, dtype=torch.float32).state_dict()
    vision = [k for k in ref if any(v in k for v in VISION)]
    with tempfile.TemporaryDirectory() as tmp:
        for kind, flags in (("hf", []), ("ct-int8", ["--scheme", "int8"]),
                            ("ct-w4a16", ["--scheme", "int4_ct", "--group-size", "32"])):
            out = os.path.join(tmp, kind)
            subprocess.run([args.quanttool, "convert", "--in", src, "--out", out] + flags, check=True,
                           stdout=subprocess.DEVNULL)
            m, info = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                                                  output_loading_info=True)
            sd = m.state_dict()
            same = all(k in sd and torch.equal(sd[k].float(), ref[k].float()) for k in vision)
            wrapped = [n for n, mod in m.named_modules()
                       if any(v in n for v in VISION) and getattr(mod, "quantization_scheme", None) is not None]
            with torch.no_grad():
                lg = m(input_ids=ids).logits[0].float().reshape(-1)
            print(f"{name} {kind}: {type(m).__name__}; load report {({k: v for k, v in info.items() if v}) or 'clean'}; "
                  f"{len(vision)} vision params equal: {same}; quantized vision modules: {len(wrapped)}; "
                  f"max |dlogit| vs float {float((lg - torch.tensor(g['logits'])).abs().max()):.3g}")
