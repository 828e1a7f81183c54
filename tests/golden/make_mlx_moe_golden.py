#!/usr/bin/env python3
"""mlx_lm's logits of the tiny mixture-of-experts models quantized by mlx_lm itself, for
tests/test_mlx_moe.cpp — nothing of quanttool involved:

  1. the tiny mixtral of tests/golden/gguf_moe (tiny-mixtral8) is copied with a
     tokenizer.json / tokenizer_config.json of their 64-token vocabulary (mlx_lm.convert loads a
     tokenizer; the weights do not depend on it), and config.json's rope_theta / num_experts given
     at the top level too (transformers 5 writes rope_parameters and num_local_experts; mlx_lm's
     ModelArgs require the older keys);
  2. mlx_lm.convert quantizes it (q_bits 4, q_group_size 32, dtype float32): the experts
     stacked into switch_mlp (models/mixtral.py sanitize), every Linear quantized, the routers
     included (mixtral.py has no quant_predicate). tiny-qwen3moe is not made: qwen3_moe.py's
     quant_predicate puts the router at group 64, which its hidden size of 32 does not divide,
     and mlx_lm.convert fails on it;
  3. mlx_lm.load runs IDS in fp32.

Writes tests/golden/gguf_moe/mlx_affine4_g32.json: {name: {"ids", "logits" [len(IDS) * 64],
"modules": the quantized module names mlx_lm wrote, "shapes": their stored weight shapes}}.
Run: python3 tests/golden/make_mlx_moe_golden.py TOKENIZER_DIR   (a Python with mlx and mlx_lm)
     (TOKENIZER_DIR: a folder with that vocabulary's tokenizer.json and tokenizer_config.json, e.g.
     `quanttool convert --in tests/golden/gguf_moe/tiny-qwen3moe.bf16.gguf --out DIR`)
"""
import json
import os
import shutil
import sys
import tempfile

import mlx.core as mx
import numpy as np
from mlx_lm import convert, load

HERE = os.path.dirname(os.path.abspath(__file__))
IDS = [(i * 37 + 11) % 64 for i in range(24)]


def main():
    tok = sys.argv[1]
    out = {}
    for name in ("mixtral8",):
        tmp = tempfile.mkdtemp()
        try:
            src = os.path.join(tmp, "hf")
            shutil.copytree(os.path.join(HERE, "gguf_moe", "tiny-" + name), src)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(tok, f), src)
            cfg_path = os.path.join(src, "config.json")
            cfg = json.load(open(cfg_path))
            cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
            cfg.setdefault("num_experts", cfg.get("num_local_experts"))
            json.dump(cfg, open(cfg_path, "w"), indent=2)
            q = os.path.join(tmp, "mlx")
            convert(src, mlx_path=q, quantize=True, q_bits=4, q_group_size=32, dtype="float32")
            model, _ = load(q)
            model.set_dtype(mx.float32)
            lg = model(mx.array([IDS]))[0].astype(mx.float32)
            mx.eval(lg)
            w = mx.load(os.path.join(q, "model.safetensors"))
            mods = sorted(k[: -len(".scales")] for k in w if k.endswith(".scales"))
            out[name] = {"ids": IDS, "logits": [float(x) for x in np.array(lg).reshape(-1)], "modules": mods,
                         "shapes": {m: list(w[m + ".weight"].shape) for m in mods}}
        finally:
            shutil.rmtree(tmp)
    with open(os.path.join(HERE, "gguf_moe", "mlx_affine4_g32.json"), "w") as fh:
        json.dump(out, fh, separators=(",", ":"))


if __name__ == "__main__":
    main()
