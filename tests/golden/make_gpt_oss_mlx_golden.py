#!/usr/bin/env python3
"""What mlx_lm computes from our mlx folder of the tiny gpt_oss model (tests/test_gpt_oss.cpp).

  QUANTTOOL=build/quanttool python3 tests/golden/make_gpt_oss_mlx_golden.py
      (mlx, mlx_lm; writes tests/golden/logits/tiny-gpt-oss/mlx_lm_affine4_g32.json)

`quanttool convert --format mlx --scheme affine --bits 4 --group-size 32` of tests/golden/logits/
tiny-gpt-oss with its YaRN "truncate" set to true (mlx_lm's YarnRoPE, models/rope_utils.py, always
floors/ceils the correction range, which transformers does only with truncate; the released
gpt-oss configs say false, so mlx_lm runs them with a slightly different RoPE) (experts stacked as mlx_lm's mlp.experts.<proj> with their biases, the router at mlx_lm's
8 bits / group 64 where the hidden size allows); mlx_lm.utils.load_model reads it (mlx_lm's own
GptOss model: sinks, YaRN, clamped SwiGLU), every quantized module's weight taken as mx.dequantize
gives it and the model run in float32 on the golden's token ids. The test checks that our engine
reads the same folder to these logits, and that mlx_lm built quantized modules where we stored them.
"""
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
import numpy as np
from mlx.utils import tree_map, tree_unflatten
from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear
from mlx_lm.utils import load_model

HERE = Path(__file__).resolve().parent
SRC = HERE / "logits" / "tiny-gpt-oss"


def dequantized_f32(m):
    swap, quantized = [], []
    for name, mod in m.named_modules():
        if isinstance(mod, (nn.QuantizedLinear, QuantizedSwitchLinear, nn.QuantizedEmbedding)):
            quantized.append(name)
            w = mx.dequantize(mod.weight, mod.scales, mod.biases, mod.group_size, mod.bits).astype(mx.float32)
            if isinstance(mod, nn.QuantizedEmbedding):
                new = nn.Embedding(w.shape[0], w.shape[1])
            elif isinstance(mod, nn.QuantizedLinear):
                new = nn.Linear(w.shape[1], w.shape[0], bias="bias" in mod)
            else:
                new = SwitchLinear(w.shape[2], w.shape[1], w.shape[0], bias="bias" in mod)
            new.weight = w
            if "bias" in mod:
                new.bias = mod.bias.astype(mx.float32)
            swap.append((name, new))
    m.update_modules(tree_unflatten(swap))
    m.update(tree_map(lambda v: v.astype(mx.float32) if v.dtype == mx.bfloat16 else v, m.parameters()))
    return sorted(quantized)


def main():
    ids = json.load(open(SRC / "logits.json"))["ids"]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(SRC, src)
        cfg = json.load(open(src / "config.json"))
        cfg["rope_parameters"]["truncate"] = True
        json.dump(cfg, open(src / "config.json", "w"), indent=2)
        out = Path(tmp) / "mlx"
        subprocess.run([os.environ.get("QUANTTOOL", "build/quanttool"), "convert", "--in", str(src), "--out",
                        str(out), "--format", "mlx", "--scheme", "affine", "--bits", "4", "--group-size", "32"],
                       check=True, stdout=subprocess.DEVNULL)
        m, _ = load_model(out)
        quantized = dequantized_f32(m)
        lg = np.array(m(mx.array([ids])).astype(mx.float32))[0]
    dst = SRC / "mlx_lm_affine4_g32.json"
    json.dump({"made_by": "tests/golden/make_gpt_oss_mlx_golden.py", "mlx_lm": mlx_lm.__version__,
               "mlx": mx.__version__, "ids": ids, "quantized_modules": quantized,
               "logits": [float(x) for x in lg.reshape(-1)]}, open(dst, "w"))
    print("wrote", dst, len(quantized), "quantized modules")


if __name__ == "__main__":
    main()
