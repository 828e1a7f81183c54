#!/usr/bin/env python3
"""Golden vectors for the int4_ct scheme (tests/test_schemes.cpp): compressed-tensors' own W4A16
"pack-quantized" weights, as llm-compressor writes them for vLLM.

  /path/venv/bin/python tests/golden/make_ct4_golden.py   (pip: torch, compressed-tensors, safetensors)

The inputs are int.safetensors' w.f32 / w.bf16 (tests/golden/make_scheme_goldens.py). For each
(dtype, group): min/max per group as the minmax observer reduces them, calculate_qparams
(symmetric: scale = absmax / 7.5 in the weights' dtype), then PackedQuantizationCompressor.compress
(q = round(clamp(x / scale, -8, 7)), packed 8 to an int32, LSB first, offset by 8) and its
decompress:
  ct4.g{G}.{dt}.packed  int32 [rows, cols/8]    ct4.g{G}.{dt}.scale  dt [rows, cols/G]
  ct4.g{G}.{dt}.deq     dt [rows, cols]
and the inputs w.f32 / w.bf16 themselves.
Written to tests/golden/schemes/ct4.safetensors. Also the package's QuantizationConfig for the
W4A16 preset at group 32 (what tiny-llama3's 32-wide rows take), as model_dump() writes it into
config.json: tests/golden/quant_export/ct_w4a16_config.json.
"""
import json
import importlib.metadata as md
import os

import torch
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationArgs, preset_name_to_scheme
from compressed_tensors.quantization.utils.helpers import calculate_qparams
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
inp = load_file(os.path.join(HERE, "schemes", "int.safetensors"))
out = {"w.f32": inp["w.f32"], "w.bf16": inp["w.bf16"]}  # the inputs, copied for the test
for dt, g in (("bf16", 128), ("bf16", 32), ("f32", 64), ("f32", 128)):
    wt = inp[f"w.{dt}"]
    scheme = preset_name_to_scheme("W4A16", ["Linear"])
    scheme.weights = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=g)
    wr = wt.reshape(wt.shape[0], -1, g)
    scale, zp = calculate_qparams(wr.amin(dim=2), wr.amax(dim=2), scheme.weights)
    assert scale.dtype == wt.dtype
    comp = PackedQuantizationCompressor.compress({"weight": wt, "weight_scale": scale, "weight_zero_point": zp}, scheme)
    assert comp["weight_packed"].dtype == torch.int32 and "weight_zero_point" not in comp
    deq = PackedQuantizationCompressor.decompress(dict(comp), scheme)["weight"]
    k = f"ct4.g{g}.{dt}"
    out[k + ".packed"] = comp["weight_packed"].contiguous()
    out[k + ".scale"] = comp["weight_scale"].contiguous()
    out[k + ".deq"] = deq.to(wt.dtype).contiguous()
made = ", ".join(f"{p} {md.version(p)}" for p in ("compressed-tensors", "torch", "safetensors"))
path = os.path.join(HERE, "schemes", "ct4.safetensors")
save_file(out, path, metadata={"made_by": made})
print(path, len(out), "tensors,", os.path.getsize(path), "bytes;", made)

from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus

sch = preset_name_to_scheme("W4A16", ["Linear"])
sch.weights.group_size = 32
qc = QuantizationConfig(config_groups={"group_0": sch}, quantization_status=QuantizationStatus.COMPRESSED,
                        format="pack-quantized", ignore=["lm_head"])
cpath = os.path.join(HERE, "quant_export", "ct_w4a16_config.json")
with open(cpath, "w") as f:
    json.dump(json.loads(qc.model_dump_json()), f, indent=1, sort_keys=True)
    f.write("\n")
print(cpath)
