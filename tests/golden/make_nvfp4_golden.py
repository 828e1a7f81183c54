#!/usr/bin/env python3
"""Golden vectors for the nvfp4 and mxfp4 rows (tests/test_fp4_ct.cpp): compressed-tensors' own
NVFP4 / MXFP4 compressors, fed the scales its observers' math gives, as llm-compressor drives it.

  /path/venv/bin/python tests/golden/make_nvfp4_golden.py   (pip: torch, compressed-tensors, safetensors)

Written to tests/golden/schemes/nvfp4.safetensors:
  w.f32, w.bf16        [48, 128] weights: normal rows, a zero row, a row of one outlier, a tiny row,
                       a row straddling the E2M1 rounding edges
  nvfp4.{dt}.packed    U8 [48, 64]  NVFP4PackedCompressor.compress: weight_packed
  nvfp4.{dt}.scale     U8 [48, 8]   weight_scale (E4M3 bytes)
  nvfp4.{dt}.global    F32 [1]      weight_global_scale (generate_gparam over the whole weight)
  nvfp4.{dt}.deq       BF16 [48, 128]  its decompress
  mxfp4.{dt}.packed / .scale (U8 E8M0 [48, 4]) / .deq   MXFP4PackedCompressor, the same way
  act.x                F32 [8, 256] tokens (outliers, a zero token, a tiny one)
  act.nvfp4            the NVFP4 preset's input fake quantization of each token, its global scale
                       generate_gparam over that token
  act.mxfp4            the MXFP4 preset's (dynamic per group of 32)
And the package's QuantizationConfig for the NVFP4A16, NVFP4, MXFP4A16 and MXFP4 presets, as
model_dump() writes it into config.json: tests/golden/quant_export/ct_{preset}_config.json.
"""
import importlib.metadata as md
import json
import os

import torch
from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus, preset_name_to_scheme
from compressed_tensors.quantization.lifecycle.forward import fake_quantize
from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
out = {}

g = torch.Generator().manual_seed(11)
w = torch.randn(48, 128, generator=g) * torch.logspace(-2, 0, 48).unsqueeze(1)
w[3] = 0
w[5] = 0
w[5, 7] = 3.0
w[6] *= 1e-4
w[7] = torch.linspace(-1.0, 1.0, 128)
w[9, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0,
                          -0.01]) / 6.0 * 6.0
w[10, :32] = -1e-3
w[10, 0] = 2.0


def groups(t, n):
    return t.unflatten(-1, (t.shape[-1] // n, n))


for dt, torch_dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
    wt = w.to(torch_dt)
    out[f"w.{dt}"] = wt.contiguous()
    # NVFP4: the global scale over the whole weight, then per-group E4M3 scales under it.
    scheme = preset_name_to_scheme("NVFP4A16", ["Linear"])
    gs = generate_gparam(wt.amin(), wt.amax())
    wg = groups(wt, 16)
    scale, zp = calculate_qparams(wg.amin(-1), wg.amax(-1), scheme.weights, global_scale=gs)
    sd = {"weight": wt, "weight_scale": scale.to(torch_dt), "weight_global_scale": gs, "weight_zero_point": zp}
    comp = NVFP4PackedCompressor.compress(sd, scheme)
    assert comp["weight_packed"].dtype == torch.uint8 and comp["weight_scale"].dtype == torch.float8_e4m3fn
    deq = NVFP4PackedCompressor.decompress(dict(comp), scheme)["weight"]
    out[f"nvfp4.{dt}.packed"] = comp["weight_packed"].contiguous()
    out[f"nvfp4.{dt}.scale"] = comp["weight_scale"].view(torch.uint8).contiguous()
    out[f"nvfp4.{dt}.global"] = comp["weight_global_scale"].contiguous()
    out[f"nvfp4.{dt}.deq"] = deq.contiguous()
    # MXFP4: E8M0 scales per 32.
    scheme = preset_name_to_scheme("MXFP4A16", ["Linear"])
    wg = groups(wt, 32)
    scale, zp = calculate_qparams(wg.amin(-1), wg.amax(-1), scheme.weights)
    comp = MXFP4PackedCompressor.compress({"weight": wt, "weight_scale": scale, "weight_zero_point": zp}, scheme)
    assert comp["weight_scale"].dtype == torch.uint8
    deq = MXFP4PackedCompressor.decompress(dict(comp), scheme)["weight"]
    out[f"mxfp4.{dt}.packed"] = comp["weight_packed"].contiguous()
    out[f"mxfp4.{dt}.scale"] = comp["weight_scale"].contiguous()
    out[f"mxfp4.{dt}.deq"] = deq.contiguous()

# Activations, fp32 tokens.
x = torch.randn(8, 256, generator=g) * torch.logspace(-3, 1, 256)[torch.randperm(256, generator=g)]
x[2] = 0
x[3] *= 1e-6
x[5, 17] = 300.0
out["act.x"] = x
a = preset_name_to_scheme("NVFP4", ["Linear"]).input_activations
rows = []
for t in x.split(1):
    gs = generate_gparam(t.amin(), t.amax())
    tg = groups(t, 16)
    s, z = calculate_qparams(tg.amin(-1), tg.amax(-1), a, global_scale=gs)
    rows.append(fake_quantize(t, s, z, a, global_scale=gs))
out["act.nvfp4"] = torch.cat(rows)
a = preset_name_to_scheme("MXFP4", ["Linear"]).input_activations
xg = groups(x, 32)
s, z = calculate_qparams(xg.amin(-1), xg.amax(-1), a)
out["act.mxfp4"] = fake_quantize(x, s, z, a)

made = ", ".join(f"{p} {md.version(p)}" for p in ("compressed-tensors", "torch", "safetensors"))
path = os.path.join(HERE, "schemes", "nvfp4.safetensors")
save_file(out, path, metadata={"made_by": made})
print(path, len(out), "tensors,", os.path.getsize(path), "bytes;", made)

for preset, fmt in (("NVFP4A16", "nvfp4-pack-quantized"), ("NVFP4", "nvfp4-pack-quantized"),
                    ("MXFP4A16", "mxfp4-pack-quantized"), ("MXFP4", "mxfp4-pack-quantized")):
    qc = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(preset, ["Linear"])},
                            quantization_status=QuantizationStatus.COMPRESSED, format=fmt, ignore=["lm_head"])
    cpath = os.path.join(HERE, "quant_export", f"ct_{preset.lower()}_config.json")
    with open(cpath, "w") as f:
        json.dump(json.loads(qc.model_dump_json()), f, indent=1, sort_keys=True)
        f.write("\n")
    print(cpath)
