#!/usr/bin/env python3
"""Acceptance check of `quanttool convert --format hf` with transformers.

Needs a virtual environment with torch, transformers, tokenizers, gguf (never run in CI):
  python3 scripts/check_hf_export.py [--model GGUF] [--text FILE] [--bin QUANTTOOL]

It
  1. exports the GGUF to a Hugging Face folder with `quanttool convert --dtype f32`;
  2. loads that folder with AutoModelForCausalLM (no missing / unexpected keys) and compares every
     tensor with what transformers' own GGUF loader gives for the same file (bit for bit), plus
     the logits of both models on the first 128 tokens of the text;
  3. tokenizes the whole text (add_special_tokens=False) with AutoTokenizer on the folder,
     tokenizers.Tokenizer.from_file on our tokenizer.json, and quanttool itself (from the GGUF and
     from the folder), and requires all ids to be equal; optionally also llama.cpp's ids
     (--llama-ids FILE, one id per line or llama-tokenize --ids output);
and prints a one-line verdict (exit code 0 on PASS, 1 on FAIL).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def read_ids(path):
    with open(path) as f:
        return [int(t) for t in re.findall(r"-?\d+", f.read())]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default=os.path.join(ROOT, "data", "wikitext-2", "wiki.test.raw"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "quanttool"))
    ap.add_argument("--out", help="export folder (default: a temporary one)")
    ap.add_argument("--llama-ids", help="token ids of the same text from llama.cpp's llama-tokenize")
    args = ap.parse_args()

    import numpy as np
    import torch
    import tokenizers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    problems, notes = [], []
    tmp = tempfile.mkdtemp(prefix="qt-check-hf-")
    out = args.out or os.path.join(tmp, "export")
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([args.bin, "convert", "--in", args.model, "--out", out, "--dtype", "f32"], check=True)

    # --- weights -------------------------------------------------------------------------------
    ours, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(k):
            problems.append("%s: %s" % (k, sorted(info[k])[:5]))
    d, f = os.path.split(os.path.abspath(args.model))
    ref = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    sd_ours, sd_ref = ours.state_dict(), ref.state_dict()
    if sorted(sd_ours) != sorted(sd_ref):
        problems.append("tensor names differ: %s" % sorted(set(sd_ours) ^ set(sd_ref))[:5])
    unequal = [n for n in sd_ref if n in sd_ours and not torch.equal(sd_ours[n], sd_ref[n])]
    if unequal:
        problems.append("%d tensors differ from transformers' GGUF loader, e.g. %s" % (len(unequal), unequal[:3]))
    notes.append("%d tensors equal to transformers' GGUF loader" % (len(sd_ref) - len(unequal)))

    # --- tokens --------------------------------------------------------------------------------
    text = open(args.text, encoding="utf-8").read()
    t0 = time.time()
    ids_auto = AutoTokenizer.from_pretrained(out)(text, add_special_tokens=False)["input_ids"]
    t_auto = time.time() - t0
    ids_tok = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json")).encode(
        text, add_special_tokens=False).ids
    runs = {}
    for name, model in (("quanttool(gguf)", args.model), ("quanttool(hf dir)", out)):
        path = os.path.join(tmp, re.sub(r"\W", "_", name) + ".txt")
        r = subprocess.run([args.bin, "tokenize", "--model", model, "--text", args.text, "--out", path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            problems.append("%s failed: %s" % (name, r.stderr.strip()))
            continue
        runs[name] = read_ids(path)
        notes.append("%s: %s" % (name, r.stderr.strip()))
    candidates = {"AutoTokenizer": ids_auto, "tokenizers.Tokenizer": ids_tok, **runs}
    if args.llama_ids:
        candidates["llama-tokenize"] = read_ids(args.llama_ids)
    base_name, base = "quanttool(gguf)", runs.get("quanttool(gguf)", ids_auto)
    for name, ids in candidates.items():
        i = first_diff(base, ids)
        if i >= 0:
            problems.append("%s differs from %s at token %d of %d/%d: %s vs %s" % (
                name, base_name, i, len(base), len(ids), base[i:i + 5], ids[i:i + 5]))

    # --- logits on a short prefix (same weights, so they should agree to float rounding) -------
    x = torch.tensor([base[:128]])
    with torch.no_grad():
        la, lb = ours(x).logits, ref(x).logits
    dmax = float((la - lb).abs().max())
    if dmax > 1e-4:
        problems.append("logits differ by %.3g" % dmax)

    verdict = "PASS" if not problems else "FAIL"
    print("%s: exported %s loads in transformers; %s; %d tokens of %s identical across %s (AutoTokenizer %.1f s); "
          "max |dlogit| %.2g on 128 tokens%s" % (
              verdict, os.path.basename(args.model), "; ".join(notes[:1]), len(base), os.path.basename(args.text),
              ", ".join(candidates), t_auto, dmax, "" if not problems else " -- " + " | ".join(problems)))
    for n in notes[1:]:
        print("  " + n)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
