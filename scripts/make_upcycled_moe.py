#!/usr/bin/env python3
"""A dense Llama HF folder "upcycled" into a mixtral: every layer's MLP copied into E experts, a
random router, top-2 renormalised. The experts are equal, so the FFN gives the dense MLP's output
whatever the routing: the model's perplexity and logits must equal the dense model's, an
end-to-end check of the mixture-of-experts path (and its timing) at a real model's size and with
its tokenizer.

Run:  python scripts/make_upcycled_moe.py SRC_FOLDER DST_FOLDER [--experts 4]
      (SRC: an unquantized llama folder with tokenizer.json, e.g. `quanttool convert` of SmolLM2;
       a venv with numpy and safetensors)
"""
import argparse
import json
import os
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("dst")
ap.add_argument("--experts", type=int, default=4)
a = ap.parse_args()

c = json.load(open(os.path.join(a.src, "config.json")))
if c.get("model_type") != "llama":
    raise SystemExit(f"error: {a.src} is {c.get('model_type')}, not llama")
t = load_file(os.path.join(a.src, "model.safetensors"))
rng = np.random.default_rng(0)
out = {k: v for k, v in t.items() if ".mlp." not in k}
for layer in range(c["num_hidden_layers"]):
    p = f"model.layers.{layer}."
    out[p + "block_sparse_moe.gate.weight"] = (rng.standard_normal((a.experts, c["hidden_size"])) * 0.05).astype(
        t[p + "mlp.gate_proj.weight"].dtype)
    for e in range(a.experts):
        q = f"{p}block_sparse_moe.experts.{e}."
        out[q + "w1.weight"] = t[p + "mlp.gate_proj.weight"]
        out[q + "w3.weight"] = t[p + "mlp.up_proj.weight"]
        out[q + "w2.weight"] = t[p + "mlp.down_proj.weight"]
os.makedirs(a.dst, exist_ok=True)
save_file(out, os.path.join(a.dst, "model.safetensors"), metadata={"format": "pt"})
c.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": a.experts,
          "num_experts_per_tok": 2, "sliding_window": None, "router_jitter_noise": 0.0})
for k in ("mlp_bias", "pretraining_tp", "attention_bias"):
    c.pop(k, None)
json.dump(c, open(os.path.join(a.dst, "config.json"), "w"), indent=2)
for f in ("tokenizer.json", "tokenizer_config.json"):
    if os.path.exists(os.path.join(a.src, f)):
        shutil.copy(os.path.join(a.src, f), a.dst)
print("wrote", a.dst)
