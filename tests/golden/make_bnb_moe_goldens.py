#!/usr/bin/env python3
"""What transformers' own bitsandbytes 4-bit quantization writes for the tiny mixture-of-experts
models (tests/golden/logits/tiny-{qwen3-moe,mixtral,gpt-oss}), for tests/test_bnb_moe.cpp —
nothing of quanttool involved:

  1. from_pretrained(TINY, quantization_config=BitsAndBytesConfig(load_in_4bit=True,
     bnb_4bit_quant_type=nf4|fp4, bnb_4bit_compute_dtype=bfloat16)) on the CPU, then
     save_pretrained. transformers replaces only nn.Linear modules by Linear4bit
     (integrations/bitsandbytes.py replace_with_bnb_linear): the attention projections and a dense
     MLP layer's. The routers (…TopKRouter.weight, an nn.Parameter) and the fused experts
     (…Experts.gate_up_proj / down_proj, 3-D nn.Parameters) stay bfloat16, and save_pretrained
     writes the experts back under the checkpoint's own names (qwen3_moe, mixtral: one Linear per
     expert; gpt_oss: fused).
  2. Every stored tensor: dtype, shape and the crc32 of its bytes; each quant_state JSON blob as
     text; config.json's quantization_config.
  3. transformers loads the saved folder back and runs the ids of logits.json with float32
     activations (scripts/check_bnb_export.py fp32_bnb_model: float parameters and each
     Linear4bit's compute_dtype float32, bitsandbytes' AVX512-bf16 CPU repacking off). With fp32
     compute, bitsandbytes' matmul_4bit on the CPU equals x @ (quant_map[code] * absmax).T in
     float32 exactly (measured: max |diff| 0.0).

Writes tests/golden/bnb_moe/<model>.json: {"transformers", "bitsandbytes", "ids",
"nf4"|"fp4": {"tensors": {name: {"dtype", "shape", "crc32"}}, "quant_state": {name: text},
"quantization_config": {...}, "logits": [len(ids) * vocab]}}.
Run: python3 tests/golden/make_bnb_moe_goldens.py   (transformers 5.24, bitsandbytes 0.50.2,
accelerate, torch; CPU)
"""
import json
import os
import struct
import sys
import tempfile
import zlib

import bitsandbytes as bnb
import torch
import transformers
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from check_bnb_export import fp32_bnb_model  # noqa: E402
MODELS = ("qwen3-moe", "mixtral", "gpt-oss")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[name] = (v["dtype"], v["shape"], data[a:b])
    return out


def fp32_logits(folder, ids):
    model = fp32_bnb_model(folder)
    with torch.no_grad():
        return [float(x) for x in model(torch.tensor([ids])).logits[0].float().reshape(-1)]


def main():
    os.makedirs(os.path.join(HERE, "bnb_moe"), exist_ok=True)
    for name in MODELS:
        src = os.path.join(HERE, "logits", "tiny-" + name)
        ids = json.load(open(os.path.join(src, "logits.json")))["ids"]
        out = {"transformers": transformers.__version__, "bitsandbytes": bnb.__version__, "ids": ids}
        for qtype in ("nf4", "fp4"):
            cfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=qtype,
                                     bnb_4bit_compute_dtype=torch.bfloat16)
            model = AutoModelForCausalLM.from_pretrained(src, quantization_config=cfg, device_map="cpu",
                                                         dtype=torch.bfloat16)
            with tempfile.TemporaryDirectory() as tmp:
                model.save_pretrained(tmp)
                stored = read_safetensors(os.path.join(tmp, "model.safetensors"))
                qc = json.load(open(os.path.join(tmp, "config.json")))["quantization_config"]
                logits = fp32_logits(tmp, ids)
            out[qtype] = {
                "tensors": {k: {"dtype": d, "shape": s, "crc32": zlib.crc32(b)} for k, (d, s, b) in sorted(stored.items())},
                "quant_state": {k: b.decode("utf-8") for k, (d, s, b) in sorted(stored.items()) if ".quant_state." in k},
                "quantization_config": qc,
                "logits": logits,
            }
        path = os.path.join(HERE, "bnb_moe", name + ".json")
        with open(path, "w") as f:
            json.dump(out, f, indent=0)
        print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
