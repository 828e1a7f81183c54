#!/usr/bin/env python3
"""Acceptance check of `quanttool convert --format compressed-tensors` (by hand, not in CI).

  python scripts/check_ct_export.py --model OUT_DIR [--source HF_DIR]

1. config.json's quantization_config must validate as the package's QuantizationConfig, with
   format "int-quantized" (W8A8), "pack-quantized" (W4A16, `--scheme int4_ct`) or
   "float-quantized" (FP8_DYNAMIC, `--scheme fp8`; FP8_BLOCK, `--scheme fp8_block`), "nvfp4-pack-quantized" (NVFP4A16 / NVFP4,
   `--scheme nvfp4` / `nvfp4_a4`) or "mxfp4-pack-quantized" (MXFP4A16 / MXFP4, `--scheme mxfp4` /
   `mxfp4_a4`); every quantized module is decompressed by the
   package's own compressor for that format (NaiveQuantizationCompressor /
   PackedQuantizationCompressor / FloatQuantizationCompressor.decompress).
2. --source (an unquantized HF folder of the same weights, `quanttool convert --format hf
   --dtype bf16`): for every module the package computes scale = calculate_qparams(min, max)
   over the scheme's groups (NVFP4: under generate_gparam's global scale of the whole weight, as
   llm-compressor's observer computes it, the smallest of them shared by q/k/v and by gate/up as
   its update_fused_layer_weight_global_scales does for vLLM) and compresses the source weight;
   our stored int8 / fp8 weight and weight_scale must equal it exactly, and so must the
   decompressed weights. Folders made with --imatrix / --gptq choose other scales: check them
   without --source (step 1 decompresses them; tests/test_fp4_ct.cpp: to our weights).
3. --ours FILE (`quanttool logits --model OUT_DIR --out FILE`: raw fp32 [N, vocab], ids in
   FILE.ids, one per line): transformers loads OUT_DIR (decompressing it through the package) and
   its fp32 logits on the same ids must be within 1e-2 of ours.
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
    ap.add_argument("--ours")
    a = ap.parse_args()
    from compressed_tensors.compressors.naive_quantized.base import (FloatQuantizationCompressor,
                                                                     NaiveQuantizationCompressor)
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization.utils.helpers import generate_gparam
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    cfg = json.loads((Path(a.model) / "config.json").read_text())
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    assert qc.format in ("int-quantized", "pack-quantized", "float-quantized", "nvfp4-pack-quantized",
                         "mxfp4-pack-quantized"), qc.format
    packed = qc.format == "pack-quantized"
    fp4 = qc.format in ("nvfp4-pack-quantized", "mxfp4-pack-quantized")
    nv = qc.format == "nvfp4-pack-quantized"
    C = (NVFP4PackedCompressor if nv else MXFP4PackedCompressor if fp4 else PackedQuantizationCompressor if packed else
         FloatQuantizationCompressor if qc.format == "float-quantized" else NaiveQuantizationCompressor)
    scheme = next(iter(qc.config_groups.values()))
    acts = scheme.input_activations
    print(f"config: format {qc.format}, weights {scheme.weights.strategy} {scheme.weights.num_bits}-bit "
          f"group {scheme.weights.group_size}, activations "
          f"{'none (weight-only)' if acts is None else f'{acts.strategy} dynamic={acts.dynamic}'}, ignore {len(qc.ignore)}")
    stored = load_dir(a.model)
    src = load_dir(a.source) if a.source else None
    n = bad = 0
    fused = {}  # NVFP4: module -> the global scale its fused group shares (the members' smallest)
    if nv and src is not None:
        groups = {}
        for k in src:
            for members in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")):
                for mem in members:
                    if k.endswith("." + mem + ".weight"):
                        groups.setdefault((k[: -len(mem + ".weight")], members), []).append(k[: -len(".weight")])
        for (_, members), mods in groups.items():
            if len(mods) == len(members) and all(m + ".weight_global_scale" in stored for m in mods):
                g = min(generate_gparam(src[m + ".weight"].amin(), src[m + ".weight"].amax()) for m in mods)
                for m in mods:
                    fused[m] = g
    for name in sorted(k for k in stored if k.endswith(".weight_scale")):
        m = name[: -len(".weight_scale")]
        if fp4:
            sd = {"weight_packed": stored[m + ".weight_packed"], "weight_scale": stored[name]}
            if nv:
                sd["weight_global_scale"] = stored[m + ".weight_global_scale"]
        elif packed:
            sd = {"weight_packed": stored[m + ".weight_packed"], "weight_scale": stored[name],
                  "weight_shape": stored[m + ".weight_shape"]}
        else:
            sd = {"weight": stored[m + ".weight"], "weight_scale": stored[name]}
        deq = C.decompress(dict(sd), scheme)["weight"]

        n += 1
        if src is None:
            continue
        w = src[m + ".weight"]
        if scheme.weights.strategy == "block":  # FP8_BLOCK: min/max of each zero-padded block
            from compressed_tensors.quantization.utils.helpers import maybe_pad_tensor_for_block_quant
            bh, bw = scheme.weights.block_structure
            pw = maybe_pad_tensor_for_block_quant(w, tuple(scheme.weights.block_structure))
            blocks = pw.reshape(pw.shape[0] // bh, bh, pw.shape[1] // bw, bw).transpose(1, 2).flatten(2)
            mn, mx = blocks.amin(-1), blocks.amax(-1)
        elif scheme.weights.group_size:
            g = scheme.weights.group_size
            wg = w.reshape(w.shape[0], -1, g)
            mn, mx = wg.amin(-1), wg.amax(-1)
        else:
            mn, mx = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
        gs = fused.get(m, generate_gparam(w.amin(), w.amax())) if nv else None
        scale, zp = calculate_qparams(mn, mx, scheme.weights, global_scale=gs)
        ref_in = {"weight": w, "weight_scale": scale.to(w.dtype) if nv else scale, "weight_zero_point": zp}
        if nv:
            ref_in["weight_global_scale"] = gs
        ref = C.compress(ref_in, scheme)
        ref_deq = C.decompress(dict(ref), scheme)["weight"]
        codes = "weight_packed" if packed or fp4 else "weight"
        raw = lambda t: t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t  # fp8 has no eq
        same = (torch.equal(raw(ref[codes]), raw(sd[codes])) and
                torch.equal(raw(ref["weight_scale"]), raw(sd["weight_scale"])) and torch.equal(ref_deq, deq) and
                (not nv or torch.equal(ref["weight_global_scale"], sd["weight_global_scale"])))
        if not same:
            bad += 1
            d = (ref_deq.float() - deq.float()).abs().max().item()
            print(f"MISMATCH {m}: max |deq diff| {d:.3e}")
    print(f"decompressed by compressed-tensors: {n} modules" +
          (f"; equal to the package's own compression of the source: {n - bad}/{n}" if src is not None else ""))
    ok = n > 0 and bad == 0
    if a.ours:
        import numpy as np
        from transformers import AutoModelForCausalLM
        kw = {}
        if qc.format in ("nvfp4-pack-quantized", "mxfp4-pack-quantized"):
            # Left compressed, transformers decompresses these weights at each forward to the
            # config's dtype (bf16), which an fp32 forward's Linear refuses: decompress at load.
            from transformers import CompressedTensorsConfig
            kw["quantization_config"] = CompressedTensorsConfig(run_compressed=False)
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, **kw)
        ids = np.loadtxt(a.ours + ".ids", dtype=np.int64).reshape(-1)
        ours = np.fromfile(a.ours, dtype=np.float32).reshape(len(ids), -1)
        with torch.no_grad():
            ref = model(torch.tensor(ids[None])).logits[0].float().numpy()
        d = float(np.abs(ours - ref).max())
        print(f"transformers ({type(model).__name__}) logits on {len(ids)} tokens: max |ours - theirs| {d:.3g}")
        if acts is not None:
            # Activations rounded per token make the forward chaotic at the last bit (results/fp8.md):
            # the first token and the mean KL say more than the largest difference.
            lp, lq = torch.log_softmax(torch.tensor(ref), -1), torch.log_softmax(torch.tensor(ours), -1)
            kl = float((lp.exp() * (lp - lq)).sum(-1).mean())
            print(f"  first token max |diff| {float(np.abs(ours[0] - ref[0]).max()):.3g}; mean KL(theirs || ours) {kl:.3g}")
        ok = ok and d < 1e-2
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
