#!/usr/bin/env python3
"""Golden for `convert --format bnb` (tests/test_cli_convert_quant.cpp, BnbFolderIsWhatBitsandbytesWrites):
bitsandbytes' own serialization of a 4-bit weight the shape of tiny-llama3's up_proj, as
QuantState.as_dict(packed=True) gives it to transformers' save_pretrained — the quant_state JSON
blob (exact bytes), the quant_map and the set of keys beside `weight` — for nf4 and fp4,
blocksize 64, a bfloat16 source.

Made with bitsandbytes 0.50.2, torch (CPU). Run: python3 tests/golden/make_bnb_export_golden.py
"""
import json
import os

import bitsandbytes as bnb
import torch

rows, cols = 64, 32  # tiny-llama3 model.layers.0.mlp.up_proj.weight
out = {"shape": [rows, cols], "blocksize": 64, "dtype": "bfloat16", "bitsandbytes": bnb.__version__}
w = torch.randn(rows, cols, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
for qt in ("nf4", "fp4"):
    _, state = bnb.functional.quantize_4bit(w, blocksize=64, quant_type=qt)
    d = state.as_dict(packed=True)
    blob_key = [k for k in d if k.startswith("quant_state.")][0]
    out[qt] = {
        "keys": sorted(d.keys()),
        "blob_key": blob_key,
        "blob": bytes(d[blob_key].tolist()).decode("utf-8"),
        "quant_map": [float(x) for x in d["quant_map"].tolist()],
        "absmax_shape": list(d["absmax"].shape),
    }
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quant_export", "bnb.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1)
print("wrote", path)
