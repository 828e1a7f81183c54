#!/usr/bin/env python3
"""Golden logits of SmolLM2 quantized by MLX (affine 4-bit, group 64), for tests/test_model.cpp
(SmolLM.MlxAffine4FolderMatchesMlxLm), computed by mlx_lm alone — nothing of quanttool involved:

  1. transformers loads models/SmolLM2-135M-Instruct.Q4_1.gguf itself (gguf-py dequantizes,
     transformers un-permutes Q/K) and saves it as an fp32 Hugging Face folder;
  2. mlx_lm.convert quantizes that folder (q_bits 4, q_group_size 64, dtype float32);
  3. mlx_lm.load runs the first 64 ids of tests/golden/logits/smollm2_q4_1_wiki512.json in fp32.

The test converts the same GGUF with `quanttool convert --scheme affine --bits 4 --group-size 64`
(f32 scales; bit-identical to mx.quantize, scripts/check_mlx_export.py) and compares its logits
from the packed weights with these (max |diff| < 1e-2, the issue's bar; same argmax).

Writes tests/golden/logits/smollm2_mlx_affine4_g64.json: ids, per-position max logit and argmax,
top-5 ids/values at 12 positions, 2048 (position, id, logit) samples.
Made with transformers 5.23.0, mlx 0.32.4 (mlx-cpu), mlx_lm 0.32.2.
Run: python3 tests/golden/make_mlx_logits_golden.py
"""
import json
import os
import shutil
import tempfile

import mlx.core as mx
import numpy as np
from mlx_lm import convert, load
from transformers import AutoModelForCausalLM, AutoTokenizer

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
gguf = os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
ids = json.load(open(os.path.join(root, "tests/golden/logits/smollm2_q4_1_wiki512.json")))["ids"][:64]
tmp = tempfile.mkdtemp()
try:
    hf = os.path.join(tmp, "hf")
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf),
                                                 dtype="float32")
    # transformers will not save_pretrained a GGUF-loaded model: write its fp32 state dict and
    # config ourselves (the tied lm_head is the embedding, left out as save_pretrained does).
    from safetensors.torch import save_file
    os.makedirs(hf)
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = "float32"
    # transformers 5 keeps rope_theta inside rope_parameters; mlx_lm reads the top-level key.
    if "rope_theta" not in cfg and isinstance(cfg.get("rope_parameters"), dict):
        cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    json.dump(cfg, open(os.path.join(hf, "config.json"), "w"))
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
    AutoTokenizer.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf)).save_pretrained(hf)
    q = os.path.join(tmp, "mlx")
    convert(hf, q, quantize=True, q_group_size=64, q_bits=4, dtype="float32")
    m, _ = load(q)
    logits = np.array(m(mx.array([ids]))[0].astype(mx.float32))
finally:
    shutil.rmtree(tmp)
rng = np.random.default_rng(0)
pos = [0, 1, 2, 5, 10, 17, 25, 31, 40, 48, 57, 63]
samples = [[int(p), int(v), float(logits[p, v])] for p, v in
           zip(rng.integers(0, 64, 2048), rng.integers(0, logits.shape[1], 2048))]
out = {
    "made_by": "tests/golden/make_mlx_logits_golden.py (transformers GGUF load -> mlx_lm.convert q4 g64 f32 -> mlx_lm)",
    "ids": ids,
    "max_logit": logits.max(1).tolist(),
    "argmax": logits.argmax(1).tolist(),
    "top5": {str(p): {"ids": np.argsort(-logits[p])[:5].tolist(),
                      "values": np.sort(logits[p])[::-1][:5].tolist()} for p in pos},
    "samples": samples,
}
path = os.path.join(root, "tests/golden/logits/smollm2_mlx_affine4_g64.json")
json.dump(out, open(path, "w"))
print("wrote", path)
