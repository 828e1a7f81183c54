#!/usr/bin/env python3
"""Acceptance check of `quanttool convert --rotate` with transformers: the rotated folder
loads with AutoModelForCausalLM (no missing / unexpected keys, untied head, norms 1) and gives the
unrotated folder's logits on the first 128 tokens of the text. Needs torch + transformers (never CI):
  python3 scripts/check_rotated_hf.py --model GGUF [--bin build/quanttool]
Prints one verdict line; exit 0 on PASS.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--bin", default="build/quanttool")
ap.add_argument("--text", default="data/wikitext-2/wiki.test.raw")
ap.add_argument("--seed", default="0")
a = ap.parse_args()
tmp = tempfile.mkdtemp()
plain, rot = os.path.join(tmp, "plain"), os.path.join(tmp, "rot")
subprocess.run([a.bin, "convert", "--in", a.model, "--out", plain, "--dtype", "f32"], check=True, capture_output=True)
subprocess.run([a.bin, "convert", "--in", a.model, "--out", rot, "--dtype", "f32", "--rotate", "--rotate-seed", a.seed],
               check=True, capture_output=True)
ids = AutoTokenizer.from_pretrained(plain)(open(a.text).read()[:4000], return_tensors="pt").input_ids[:, :128]
out = {}
for name, path in (("plain", plain), ("rot", rot)):
    m, info = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, output_loading_info=True)
    bad = [k for k in ("missing_keys", "unexpected_keys") if info[k]]
    if bad:
        sys.exit(f"FAIL: {name}: {bad} {info}")
    with torch.no_grad():
        out[name] = m(ids).logits[0]
    if name == "rot":
        assert not m.config.tie_word_embeddings, "rotated model still tied"
        assert torch.equal(m.model.norm.weight, torch.ones_like(m.model.norm.weight)), "final norm not folded"
        moved = (m.model.embed_tokens.weight - AutoModelForCausalLM.from_pretrained(plain).model.embed_tokens.weight).abs().max().item()
d = (out["rot"] - out["plain"]).abs().max().item()
ok = d < 2e-3 and moved > 0.05
print(f"{'PASS' if ok else 'FAIL'}: rotated folder (seed {a.seed}) in transformers: logits of {ids.shape[1]} tokens "
      f"max |diff| {d:.2e} vs the unrotated folder (|logit| up to {out['plain'].abs().max().item():.1f}); "
      f"embedding moved by up to {moved:.3f}")
sys.exit(0 if ok else 1)
