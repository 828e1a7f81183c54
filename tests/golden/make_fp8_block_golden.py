#!/usr/bin/env python3
"""Golden vectors for the fp8_block scheme (tests/test_fp8_block.cpp): compressed-tensors' own
FP8_BLOCK weights and activations, as llm-compressor writes them for vLLM.

  /path/venv/bin/python tests/golden/make_fp8_block_golden.py   (pip: torch, compressed-tensors, safetensors)

Written to tests/golden/schemes/fp8_block.safetensors:
  w.f32, w.bf16   [160, 256] weights (160 rows: the last row block is padded, as the package pads)
  fp8b.{dt}.weight / .scale / .deq   FloatQuantizationCompressor.compress with the FP8_BLOCK
                  preset's weight args (strategy block, 128×128: one scale per block from
                  calculate_qparams of the block's min/max, absmax/448 in the weights' dtype), and
                  its decompress
  act.x / act.deq f32 [8, 384] dynamic fp8 fake quantization of activations in groups of 128
                  (the preset's input_activations: forward_quantize, strategy group)
  lin.x / lin.y   f32 [3, 256] / [3, 160]: the bf16 block weight's Linear as the package's forward
                  computes it in an fp32 model (rounded activations times e4m3·scale in fp32)
And the package's QuantizationConfig for the FP8_BLOCK preset, as model_dump() writes it into
config.json: tests/golden/quant_export/ct_fp8_block_config.json.
"""
import importlib.metadata as md
import json
import os

import torch
from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus, preset_name_to_scheme)
from compressed_tensors.quantization.lifecycle.forward import fake_quantize
from compressed_tensors.quantization.utils.helpers import calculate_qparams, maybe_pad_tensor_for_block_quant
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
out = {}
scheme = preset_name_to_scheme("FP8_BLOCK", ["Linear"])
bh, bw = scheme.weights.block_structure

g = torch.Generator().manual_seed(11)
w = torch.randn(160, 256, generator=g) * 0.02
w[5, 7] = 0.9  # an outlier in one block
w[128:160, :] = 0  # the last row blocks: the first all zero (scale eps) ...
w[140, 200] = -1e-7  # ... the second holding one tiny value
for dt, wt in (("f32", w), ("bf16", w.to(torch.bfloat16))):
    out[f"w.{dt}"] = wt.contiguous()
    # The observer's per-block min and max (llm-compressor's MinMax observer reshapes the padded
    # weight into [rows/128, cols/128, 128·128] blocks the same way).
    p = maybe_pad_tensor_for_block_quant(wt, (bh, bw))
    blocks = p.reshape(p.shape[0] // bh, bh, p.shape[1] // bw, bw).transpose(1, 2).flatten(2)
    scale, zp = calculate_qparams(blocks.amin(dim=2), blocks.amax(dim=2), scheme.weights)
    assert scale.dtype == wt.dtype and scale.shape == (2, 2)
    comp = FloatQuantizationCompressor.compress({"weight": wt, "weight_scale": scale, "weight_zero_point": zp}, scheme)
    assert comp["weight"].dtype == torch.float8_e4m3fn and comp["weight"].shape == wt.shape
    deq = FloatQuantizationCompressor.decompress(dict(comp), scheme)["weight"]
    out[f"fp8b.{dt}.weight"] = comp["weight"].contiguous()
    out[f"fp8b.{dt}.scale"] = comp["weight_scale"].contiguous()
    out[f"fp8b.{dt}.deq"] = deq.contiguous()

# Dynamic activations in groups of 128 (the preset's input_activations), fp32 tokens with
# outliers, a zero token and a zero group.
x = torch.randn(8, 384, generator=g) * torch.logspace(-3, 1, 384)[torch.randperm(384, generator=g)]
x[2] = 0
x[3, 128:256] = 0
x[5, 17] = 300.0
a = scheme.input_activations
xg = x.unflatten(-1, (3, 128))
s, z = calculate_qparams(xg.amin(dim=-1), xg.amax(dim=-1), a)
out["act.x"] = x
out["act.deq"] = fake_quantize(x, s, z, a)

# The Linear's product in an fp32 model, as compressed-tensors' forward computes it from the
# stored bf16 block weight (transformers' loaded module gives these values exactly: results/fp8.md):
# the activations fake-quantized in groups of 128, times e4m3(code)·scale widened to fp32 (no
# rounding of the product to bf16, unlike decompress).
xl = torch.randn(3, 256, generator=g)
sl, zl = calculate_qparams(xl.unflatten(-1, (2, 128)).amin(-1), xl.unflatten(-1, (2, 128)).amax(-1), a)
wk = out["fp8b.bf16.weight"].float() * out["fp8b.bf16.scale"].float().repeat_interleave(bh, 0)[:160].repeat_interleave(bw, 1)
out["lin.x"] = xl
out["lin.y"] = fake_quantize(xl, sl, zl, a) @ wk.T

made = ", ".join(f"{p} {md.version(p)}" for p in ("compressed-tensors", "torch", "safetensors"))
path = os.path.join(HERE, "schemes", "fp8_block.safetensors")
save_file(out, path, metadata={"made_by": made})
print(path, len(out), "tensors,", os.path.getsize(path), "bytes;", made)

qc = QuantizationConfig(config_groups={"group_0": scheme}, quantization_status=QuantizationStatus.COMPRESSED,
                        format="float-quantized", ignore=["lm_head"])
cpath = os.path.join(HERE, "quant_export", "ct_fp8_block_config.json")
with open(cpath, "w") as f:
    json.dump(json.loads(qc.model_dump_json()), f, indent=1, sort_keys=True)
    f.write("\n")
print(cpath)
