#!/usr/bin/env python3
"""Acceptance check of `quanttool convert --format compressed-tensors` (by hand, not in CI).

  python scripts/check_ct_export.py --model OUT_DIR [--source HF_DIR]

1. config.json's quantization_config must validate as the package's QuantizationConfig, with
   format "int-quantized"; every quantized module is decompressed by the package's own
   compressor for that format (NaiveQuantizationCompressor.decompress).
2. --source (an unquantized HF folder of the same weights, `quanttool convert --format hf
   --dtype bf16`): for every module the package computes scale = calculate_qparams(min, max)
   over the scheme's groups and compresses the source weight; our stored int8 weight and
   weight_scale must equal it exactly, and so must the decompressed weights.
"""
import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file


def load_dir(d):
    out = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--source")
    a = ap.parse_args()
    from compressed_tensors.compressors.naive_quantized.base import NaiveQuantizationCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    cfg = json.loads((Path(a.model) / "config.json").read_text())
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    assert qc.format == "int-quantized", qc.format
    scheme = next(iter(qc.config_groups.values()))
    print(f"config: format {qc.format}, weights {scheme.weights.strategy} {scheme.weights.num_bits}-bit "
          f"group {scheme.weights.group_size}, activations {scheme.input_activations.strategy} "
          f"dynamic={scheme.input_activations.dynamic}, ignore {len(qc.ignore)}")
    stored = load_dir(a.model)
    src = load_dir(a.source) if a.source else None
    n = bad = 0
    for name in sorted(k for k in stored if k.endswith(".weight_scale")):
        m = name[: -len(".weight_scale")]
        sd = {"weight": stored[m + ".weight"], "weight_scale": stored[name]}
        deq = NaiveQuantizationCompressor.decompress(sd, scheme)["weight"]
        n += 1
        if src is None:
            continue
        w = src[m + ".weight"]
        if scheme.weights.group_size:
            g = scheme.weights.group_size
            wg = w.reshape(w.shape[0], -1, g)
            mn, mx = wg.amin(-1), wg.amax(-1)
        else:
            mn, mx = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
        scale, zp = calculate_qparams(mn, mx, scheme.weights)
        ref = NaiveQuantizationCompressor.compress({"weight": w, "weight_scale": scale, "weight_zero_point": zp}, scheme)
        ref_deq = NaiveQuantizationCompressor.decompress(ref, scheme)["weight"]
        same = (torch.equal(ref["weight"], sd["weight"]) and torch.equal(ref["weight_scale"], sd["weight_scale"])
                and torch.equal(ref_deq, deq))
        if not same:
            bad += 1
            d = (ref_deq.float() - deq.float()).abs().max().item()
            print(f"MISMATCH {m}: max |deq diff| {d:.3e}")
    print(f"decompressed by compressed-tensors: {n} modules" +
          (f"; equal to the package's own compression of the source: {n - bad}/{n}" if src is not None else ""))
    ok = n > 0 and bad == 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
