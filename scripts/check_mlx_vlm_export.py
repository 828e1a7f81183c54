#!/usr/bin/env python3
"""Acceptance check of `quanttool convert --format mlx` on vision-language models (run by hand, not in
CI; needs mlx and mlx_vlm).

  python scripts/check_mlx_vlm_export.py --quanttool build/quanttool [--bits 4 --group-size 32]
      [--vision-bits B] [--models qwen2_5_vl,qwen3_vl]

For each tiny golden VLM (tests/golden/vlm/tiny-<name>, made by transformers 5):
1. The folder is copied with its config.json in the form the released checkpoints have (made by
   transformers 4.5x: Qwen2.5-VL's text fields at the top level with rope_theta and an "mrope"
   rope_scaling, Qwen3-VL's text_config with rope_theta): mlx_vlm 0.7 reads only that form.
2. `quanttool convert --format mlx` writes it; mlx_vlm.convert (quantize, the same bits and group)
   writes its own from the same copy.
3. mlx_vlm.utils.load_model loads both; the language model's logits on the golden's token ids
   (each quantized module's weight as mx.dequantize gives it, then everything in float32) must
   agree within 1e-4, and every quantized language-model module
   of ours (weight, scales, biases) must equal mlx_vlm's bit for bit (its names after its sanitize).
   With --vision-bits, mlx_vlm's folder is made with the vision tower quantized too (mlx_vlm.convert's
   quant_predicate) and ours with --vision-bits.
Exit code 0 when every check passed.

--golden FILE writes, per model, mlx_vlm.convert's own folder's logits and its quantized modules
(mlx_vlm's paths) to FILE (tests/golden/vlm/mlx_vlm.json, read by tests/test_vlm.cpp):
  python scripts/check_mlx_vlm_export.py --vision-bits 8 --golden tests/golden/vlm/mlx_vlm.json
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def released_config(cfg):
    """transformers 5's nested config in the form of the released (transformers 4.5x) files."""
    c = json.loads(json.dumps(cfg))
    t = c.get("text_config", {})
    rp = t.pop("rope_parameters", None) or {}
    c["vision_config"]["model_type"] = c["model_type"]  # transformers 4.5x's vision config class
    c["vision_config"].pop("rope_parameters", None)
    if c["model_type"] == "qwen2_5_vl":
        for k, v in t.items():
            if k != "model_type":
                c.setdefault(k, v)
        c["rope_theta"] = rp.get("rope_theta", 1e6)
        c["rope_scaling"] = {"type": "mrope", "mrope_section": rp.get("mrope_section", [16, 24, 24])}
        c["torch_dtype"] = c.get("dtype", "bfloat16")
    elif c["model_type"] == "qwen3_vl":
        t["rope_theta"] = rp.get("rope_theta", 5e6)
        t["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
        c["text_config"] = t
    return c


def logits(path, ids):
    """The language model's logits in float32, each quantized module's weight as mx.dequantize
    gives it (in the stored scales' dtype, as mlx's quantized kernels see it) then widened."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_map, tree_unflatten
    from mlx_vlm.utils import load_model

    m = load_model(Path(path))
    swap = []
    for name, mod in m.named_modules():
        if isinstance(mod, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            w = mx.dequantize(mod.weight, mod.scales, mod.biases, mod.group_size, mod.bits).astype(mx.float32)
            if isinstance(mod, nn.QuantizedEmbedding):
                new = nn.Embedding(w.shape[0], w.shape[1])
            else:
                new = nn.Linear(w.shape[1], w.shape[0], bias="bias" in mod)
                if "bias" in mod:
                    new.bias = mod.bias.astype(mx.float32)
            new.weight = w
            swap.append((name, new))
    m.update_modules(tree_unflatten(swap))
    m.update(tree_map(lambda v: v.astype(mx.float32) if v.dtype == mx.bfloat16 else v, m.parameters()))
    out = m.language_model(mx.array([ids]))
    lg = out.logits if hasattr(out, "logits") else out
    return np.array(lg.astype(mx.float32))[0]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quanttool", default=str(ROOT / "build" / "quanttool"))
    p.add_argument("--bits", type=int, default=4)
    p.add_argument("--group-size", type=int, default=32)
    p.add_argument("--vision-bits", type=int, default=0)
    p.add_argument("--models", default="qwen2_5_vl,qwen3_vl")
    p.add_argument("--golden", default="")
    a = p.parse_args()
    import mlx.core as mx
    from mlx_vlm.convert import convert

    ok = True
    golden = {}
    for name in a.models.split(","):
        src = ROOT / "tests" / "golden" / "vlm" / f"tiny-{name}"
        ids = json.load(open(src / "logits.json"))["ids"]
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            rel = tmp / "src"
            shutil.copytree(src, rel)
            cfg = released_config(json.load(open(src / "config.json")))
            json.dump(cfg, open(rel / "config.json", "w"), indent=2)
            ours, theirs = tmp / "ours", tmp / "theirs"
            cmd = [a.quanttool, "convert", "--in", str(rel), "--out", str(ours), "--format", "mlx", "--scheme",
                   "affine", "--bits", str(a.bits), "--group-size", str(a.group_size)]
            if a.vision_bits:
                cmd += ["--vision-bits", str(a.vision_bits)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            pred = (lambda path, module: True) if a.vision_bits else None
            if a.vision_bits and a.vision_bits != a.bits:
                pred = lambda path, module: ({"bits": a.vision_bits, "group_size": a.group_size}
                                             if "vision" in path else True)
            convert(str(rel), mlx_path=str(theirs), quantize=True, q_group_size=a.group_size, q_bits=a.bits,
                    quant_predicate=pred)
            lo, lt = logits(ours, ids), logits(theirs, ids)
            d = float(np.abs(lo - lt).max())
            good = d < 1e-4
            # Our quantized modules against mlx_vlm's, under its names (it saves after its sanitize).
            from mlx_vlm.utils import load_model
            mt = dict(mx.load(str(theirs / "model.safetensors")))
            mo_model = load_model(ours)
            from mlx.utils import tree_flatten
            mo = dict(tree_flatten(mo_model.parameters()))
            qmods = [k[: -len(".scales")] for k in mt if k.endswith(".scales")]
            same = 0
            for m in qmods:
                for suf in (".weight", ".scales", ".biases"):
                    if m + suf not in mo or not bool(mx.array_equal(mo[m + suf], mt[m + suf])):
                        print(f"  {name}: {m + suf} differs or is missing")
                        good = False
                        break
                else:
                    same += 1
            ours_q = [k for k in mo if k.endswith(".scales")]
            if len(ours_q) != len(qmods):
                print(f"  {name}: {len(ours_q)} quantized modules in ours, {len(qmods)} in mlx_vlm's")
                good = False
            print(f"{name}: mlx_vlm loads ours; max |logit diff| vs mlx_vlm.convert's folder {d:.2e}; "
                  f"{same} of {len(qmods)} quantized modules bit-equal -> {'ok' if good else 'FAIL'}")
            ok &= good
            golden[name] = {"made_by": "mlx_vlm.convert " + __import__("mlx_vlm").__version__,
                            "bits": a.bits, "group_size": a.group_size, "vision_bits": a.vision_bits,
                            "ids": ids, "logits": [float(x) for x in lt.reshape(-1)],
                            "quantized_modules": sorted(qmods)}
    if a.golden:
        json.dump(golden, open(a.golden, "w"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
