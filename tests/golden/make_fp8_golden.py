#!/usr/bin/env python3
"""Golden vectors for FP8 E4M3 and the fp8 scheme (tests/test_fp8.cpp): torch's own cast and
compressed-tensors' own FP8_DYNAMIC weights and activations, as llm-compressor writes them for vLLM.

  /path/venv/bin/python tests/golden/make_fp8_golden.py   (pip: torch, compressed-tensors, safetensors)

Written to tests/golden/schemes/fp8.safetensors:
  e4m3.in.bf16   bf16 [65536]   every bf16 bit pattern (NaN and Inf included)
  e4m3.out.bf16  U8 [65536]     x.to(torch.float8_e4m3fn) of each, as bytes
  e4m3.in.f32    f32 [n]        every e4m3 value, the midpoints between neighbours, one fp32 ulp
                                either side of each, and the overflow edge (448 … 480)
  e4m3.out.f32   U8 [n]
  fp8.{dt}.weight / .scale / .deq   FloatQuantizationCompressor.compress of int.safetensors' w.{dt}
                 with the FP8_DYNAMIC preset's weight args (per-channel scale from
                 calculate_qparams: absmax/448 in the weights' dtype), and its decompress
  w.f32, w.bf16  the inputs
  act.x / act.deq  f32 [8, 256]  per-token dynamic fp8 fake quantization of activations
                 (the preset's input_activations: forward_quantize, strategy token)
And the package's QuantizationConfig for the FP8_DYNAMIC preset, as model_dump() writes it into
config.json: tests/golden/quant_export/ct_fp8_dynamic_config.json.
"""
import importlib.metadata as md
import json
import os

import torch
from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus, preset_name_to_scheme)
from compressed_tensors.quantization.lifecycle.forward import fake_quantize
from compressed_tensors.quantization.utils.helpers import calculate_qparams
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
E4M3 = torch.float8_e4m3fn
out = {}

# torch's cast over every bf16 bit pattern.
bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)
xb = bits.view(torch.bfloat16)
out["e4m3.in.bf16"] = xb.clone()
out["e4m3.out.bf16"] = xb.to(E4M3).view(torch.uint8).clone()

# fp32: every value, the midpoints and one ulp either side, the overflow edge.
vals = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(E4M3).to(torch.float32)
pos = torch.sort(vals[torch.isfinite(vals) & (vals >= 0)]).values
mid = (pos[1:] + pos[:-1]) / 2  # exact in fp32
edge = torch.tensor([448.0, 456.0, 463.99997, 464.0, 464.00003, 470.0, 479.99997, 480.0, 1e6, 2.0**-10, 2.0**-11,
                     3 * 2.0**-11, 2.0**-12, 1e-30, 1.4e-45])
cand = torch.cat([pos, mid, torch.nextafter(mid, torch.tensor(0.0)), torch.nextafter(mid, torch.tensor(1e9)), edge])
cand = torch.cat([cand, -cand])
out["e4m3.in.f32"] = cand.contiguous()
out["e4m3.out.f32"] = cand.to(E4M3).view(torch.uint8).clone()

# FP8_DYNAMIC weights, per output channel.
inp = load_file(os.path.join(HERE, "schemes", "int.safetensors"))
scheme = preset_name_to_scheme("FP8_DYNAMIC", ["Linear"])
for dt in ("f32", "bf16"):
    wt = inp[f"w.{dt}"]
    out[f"w.{dt}"] = wt
    scale, zp = calculate_qparams(wt.amin(dim=1, keepdim=True), wt.amax(dim=1, keepdim=True), scheme.weights)
    assert scale.dtype == wt.dtype and scale.shape == (wt.shape[0], 1)
    comp = FloatQuantizationCompressor.compress({"weight": wt, "weight_scale": scale, "weight_zero_point": zp}, scheme)
    assert comp["weight"].dtype == E4M3 and "weight_zero_point" not in comp
    deq = FloatQuantizationCompressor.decompress(dict(comp), scheme)["weight"]
    out[f"fp8.{dt}.weight"] = comp["weight"].contiguous()
    out[f"fp8.{dt}.scale"] = comp["weight_scale"].contiguous()
    out[f"fp8.{dt}.deq"] = deq.contiguous()

# Per-token dynamic activations (the preset's input_activations), fp32 tokens with outliers, a
# zero token and a tiny one.
g = torch.Generator().manual_seed(7)
x = torch.randn(8, 256, generator=g) * torch.logspace(-3, 1, 256)[torch.randperm(256, generator=g)]
x[2] = 0
x[3] *= 1e-6
x[5, 17] = 300.0
a = scheme.input_activations
amin, amax = x.amin(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)
s, z = calculate_qparams(amin, amax, a)
out["act.x"] = x
out["act.deq"] = fake_quantize(x, s, z, a)

made = ", ".join(f"{p} {md.version(p)}" for p in ("compressed-tensors", "torch", "safetensors"))
path = os.path.join(HERE, "schemes", "fp8.safetensors")
save_file(out, path, metadata={"made_by": made})
print(path, len(out), "tensors,", os.path.getsize(path), "bytes;", made)

qc = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme("FP8_DYNAMIC", ["Linear"])},
                        quantization_status=QuantizationStatus.COMPRESSED, format="float-quantized",
                        ignore=["lm_head"])
cpath = os.path.join(HERE, "quant_export", "ct_fp8_dynamic_config.json")
with open(cpath, "w") as f:
    json.dump(json.loads(qc.model_dump_json()), f, indent=1, sort_keys=True)
    f.write("\n")
print(cpath)
