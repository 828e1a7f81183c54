#!/usr/bin/env python3
"""Goldens for tests/test_cli_convert_quant.cpp, written by the library that defines each layout.

compressed-tensors: the package's QuantizationConfig for the W8A8 preset (see ct_golden).
mlx: mlx_lm quantizes tests/golden/logits/tiny-llama3 (bf16) with group 32, 4 bits, and a
quant_predicate giving model.layers.0.mlp.down_proj 8 bits (what our recipe
{"match": "model.layers.0.mlp.down_proj.weight", "bits": 8} asks) — the same call mlx_lm.convert
makes (utils.quantize_model, then save_config's "quantization_config" copy). Recorded: the
config's quantization blocks, and every saved tensor's dtype, shape and crc32 of its bytes.

Versions: see the "versions" key of the output. Run: python tests/golden/make_quant_export_goldens.py
"""
import json
import zlib
from pathlib import Path

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.utils import load_model, quantize_model

HERE = Path(__file__).resolve().parent
TINY = HERE / "logits" / "tiny-llama3"


def crc(a: mx.array) -> int:
    # bf16 has no numpy dtype: reinterpret as uint16 (the bytes are what we compare)
    if a.dtype == mx.bfloat16:
        a = a.view(mx.uint16)
    return zlib.crc32(np.array(a).tobytes()) & 0xFFFFFFFF


def mlx_golden():
    model, config = load_model(TINY)

    def predicate(path, module):
        if path == "model.layers.0.mlp.down_proj":
            return {"group_size": 32, "bits": 8, "mode": "affine"}
        return True

    model, qconfig = quantize_model(model, config, group_size=32, bits=4, quant_predicate=predicate)
    tensors = {}
    for name, a in tree_flatten(model.parameters()):
        tensors[name] = {"dtype": str(a.dtype).replace("mlx.core.", ""), "shape": list(a.shape), "crc32": crc(a)}
    return {"quantization": qconfig["quantization"], "quantization_config": qconfig["quantization_config"],
            "tensors": tensors}


def ct_golden():
    """compressed-tensors: the package's own QuantizationConfig for llm-compressor's W8A8 preset
    (per channel) and its per-group variant, as model_dump() writes them into config.json."""
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus, preset_name_to_scheme

    out = {}
    for key, group in (("channel", None), ("group64", 64)):
        s = preset_name_to_scheme("W8A8", ["Linear"])
        if group:
            s.weights.strategy, s.weights.group_size = "group", group
        qc = QuantizationConfig(config_groups={"group_0": s}, quantization_status=QuantizationStatus.COMPRESSED,
                                format="int-quantized", ignore=["lm_head"])
        out[key] = json.loads(qc.model_dump_json())
    return out


def main():
    import compressed_tensors

    out = {"versions": {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__,
                        "compressed_tensors": compressed_tensors.__version__},
           "mlx_tiny_llama3_g32_b4": mlx_golden(), "ct_w8a8_config": ct_golden()}
    (HERE / "quant_export" / "golden.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
