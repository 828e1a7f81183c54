#!/usr/bin/env python3
"""Golden vectors for the GGUF -> Hugging Face export and the model configuration.

References (never our own C++ code):
  * transformers' own GGUF loader (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)),
    which dequantizes and un-permutes Q/K independently of quanttool;
  * torch's float32 -> bfloat16 / float16 casts (round to nearest even) for the bf16/f16 exports;
  * gguf-py's GGUFWriter and quantizers, to write tiny GGUF files the way convert_hf_to_gguf.py
    does (Q/K rows permuted for llama) from known HF-layout arrays;
  * transformers' config classes and its llama3 RoPE init function for config facts.

Writes into tests/golden/hf_export/:
  smollm2_q4_1.json   per-tensor crc32 of the f32 / bf16 / f16 bytes + sample values + config,
                      for models/SmolLM2-135M-Instruct.Q4_1.gguf (sha256 recorded)
  tiny_llama3.gguf, tiny_qwen2.gguf, tiny_qwen3.gguf   tiny models (a few KiB each)
  tiny.json           per tiny model: expected config + per-tensor crc32 / shape of the HF tensors
  configs.json        config.json files as transformers saves them + the attributes it derives,
                      and llama3 rope factors from transformers' rope init

Run (needs torch, transformers, gguf in the venv; never in CI):
  python3 tests/golden/make_hf_export_golden.py [--model PATH] [--skip-model]
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hf_export")
ROOT = os.path.dirname(os.path.dirname(HERE))


def crc(a: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(a).tobytes())


def samples(a: np.ndarray):
    flat = a.reshape(-1)
    n = flat.size
    idx = sorted({0, 1 % n, n // 3, n // 2, (2 * n) // 3, n - 1})
    return [[int(i), float(flat[i])] for i in idx]


def load_with_transformers(gguf_path):
    import torch
    from transformers import AutoModelForCausalLM

    d, f = os.path.split(os.path.abspath(gguf_path))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    return model


def tensors_of(model):
    """name -> float32 numpy array (a tied lm_head is reported once, under embed_tokens)."""
    out = {}
    tied = model.config.tie_word_embeddings
    for name, t in model.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        out[name] = t.detach().to("cpu").float().contiguous().numpy()
    return out


CONFIG_KEYS = ["model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
               "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings", "bos_token_id",
               "eos_token_id"]


def config_facts(cfg):
    d = {k: getattr(cfg, k, None) for k in CONFIG_KEYS}
    if d["head_dim"] is None:  # what the modeling code uses then (e.g. Qwen2)
        d["head_dim"] = cfg.hidden_size // cfg.num_attention_heads
    rp = getattr(cfg, "rope_parameters", None) or {}
    d["rope_theta"] = rp.get("rope_theta", getattr(cfg, "rope_theta", None))
    d["rope_type"] = rp.get("rope_type", "default")
    for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
        if k in rp:
            d["rope_" + k] = rp[k]
    return d


# ---------------------------------------------------------------- the real model

def smollm2_golden(model_path):
    import torch

    sha = hashlib.sha256(open(model_path, "rb").read()).hexdigest()
    model = load_with_transformers(model_path)
    tensors = {}
    for name, a in tensors_of(model).items():
        t = torch.from_numpy(a)
        tensors[name] = {
            "shape": list(a.shape),
            "crc32_f32": crc(a),
            "crc32_bf16": crc(t.to(torch.bfloat16).view(torch.int16).numpy()),
            "crc32_f16": crc(t.to(torch.float16).view(torch.int16).numpy()),
            "samples": samples(a),
        }
    # The file as gguf-py reads it (for inspect): tensor count, bytes and elements per ggml type.
    from gguf import GGUFReader

    by_type = {}
    for t in GGUFReader(model_path).tensors:
        e = by_type.setdefault(t.tensor_type.name, {"tensors": 0, "bytes": 0, "elements": 0})
        e["tensors"] += 1
        e["bytes"] += int(t.n_bytes)
        e["elements"] += int(t.n_elements)
    golden = {
        "gguf_by_type": by_type,
        "source": "transformers %s GGUF loader, torch %s" % (__import__("transformers").__version__,
                                                               torch.__version__),
        "gguf": os.path.basename(model_path),
        "gguf_sha256": sha,
        "config": config_facts(model.config),
        "tensors": tensors,
    }
    with open(os.path.join(OUT, "smollm2_q4_1.json"), "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
    print("smollm2: %d tensors" % len(tensors))


# ---------------------------------------------------------------- tiny GGUF models

def permute_hf_to_gguf(w, n_head):
    # convert_hf_to_gguf.py LlamaModel.permute (docs/spec/gguf.md §Q/K permutation)
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def hf_names(n_layers, tied, bias, qk_norm):
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not tied:
        names["lm_head.weight"] = "output.weight"
    for i in range(n_layers):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        names.update({
            p + "input_layernorm.weight": b + "attn_norm.weight",
            p + "post_attention_layernorm.weight": b + "ffn_norm.weight",
            p + "self_attn.q_proj.weight": b + "attn_q.weight",
            p + "self_attn.k_proj.weight": b + "attn_k.weight",
            p + "self_attn.v_proj.weight": b + "attn_v.weight",
            p + "self_attn.o_proj.weight": b + "attn_output.weight",
            p + "mlp.gate_proj.weight": b + "ffn_gate.weight",
            p + "mlp.up_proj.weight": b + "ffn_up.weight",
            p + "mlp.down_proj.weight": b + "ffn_down.weight",
        })
        if bias:
            for x in "qkv":
                names[p + "self_attn.%s_proj.bias" % x] = b + "attn_%s.bias" % x
        if qk_norm:
            names[p + "self_attn.q_norm.weight"] = b + "attn_q_norm.weight"
            names[p + "self_attn.k_norm.weight"] = b + "attn_k_norm.weight"
    return names


def llama3_rope_factors(head_dim, theta, rs):
    """rope_freqs.weight as transformers defines llama3 scaling: default inv_freq / scaled inv_freq."""
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                      max_position_embeddings=131072,
                      rope_parameters=dict(rope_type="llama3", rope_theta=theta, **rs))
    inv_scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, torch.device("cpu"))
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    return (inv / inv_scaled.double().numpy()).astype(np.float32)


TINY = {
    # llama: Q/K permuted in the file, separate lm_head, llama3 RoPE scaling via rope_freqs,
    # quantized and half-precision tensors mixed.
    "tiny_llama3": dict(arch="llama", hidden=32, inter=64, layers=2, heads=4, kv=2, head_dim=8,
                        vocab=64, theta=500000.0, eps=1e-5, tied=False, bias=False, qk_norm=False,
                        rope=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=8192)),
    # qwen2: q/k/v bias, tied embeddings, rows not permuted.
    "tiny_qwen2": dict(arch="qwen2", hidden=32, inter=64, layers=2, heads=4, kv=2, head_dim=8,
                       vocab=64, theta=1000000.0, eps=1e-6, tied=True, bias=True, qk_norm=False,
                       rope=None),
    # qwen3: per-head q/k norm; head_dim 128 (Qwen3Config's default, which transformers' GGUF
    # loader assumes since it does not read attention.key_length) differs from hidden/heads = 16.
    "tiny_qwen3": dict(arch="qwen3", hidden=32, inter=64, layers=1, heads=2, kv=1, head_dim=128,
                       vocab=64, theta=1000000.0, eps=1e-6, tied=True, bias=False, qk_norm=True,
                       rope=None),
}


def make_tiny(name, spec, seed):
    import gguf
    from gguf import GGMLQuantizationType as Q

    rng = np.random.default_rng(seed)
    h, inter, hd = spec["hidden"], spec["inter"], spec["head_dim"]
    nq, nkv = spec["heads"] * hd, spec["kv"] * hd
    shapes = {
        "model.embed_tokens.weight": (spec["vocab"], h), "model.norm.weight": (h,),
        "lm_head.weight": (spec["vocab"], h),
    }
    for i in range(spec["layers"]):
        p = "model.layers.%d." % i
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (nq, h), p + "self_attn.k_proj.weight": (nkv, h),
            p + "self_attn.v_proj.weight": (nkv, h), p + "self_attn.o_proj.weight": (h, nq),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
            p + "self_attn.q_proj.bias": (nq,), p + "self_attn.k_proj.bias": (nkv,),
            p + "self_attn.v_proj.bias": (nkv,),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
        })
    names = hf_names(spec["layers"], spec["tied"], spec["bias"], spec["qk_norm"])
    path = os.path.join(OUT, name + ".gguf")
    w = gguf.GGUFWriter(path, spec["arch"])
    a = spec["arch"]
    w.add_name(name)
    w.add_context_length(4096)
    w.add_embedding_length(h)
    w.add_feed_forward_length(inter)
    w.add_block_count(spec["layers"])
    w.add_head_count(spec["heads"])
    w.add_head_count_kv(spec["kv"])
    w.add_rope_freq_base(spec["theta"])
    w.add_layer_norm_rms_eps(spec["eps"])
    w.add_vocab_size(spec["vocab"])
    w.add_rope_dimension_count(hd)
    if hd != h // spec["heads"]:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_file_type(7)
    permute = a == "llama"
    expected = {}  # HF-layout arrays: what the file holds, dequantized by gguf-py, un-permuted
    kinds = [Q.F32, Q.Q8_0, Q.F16, Q.Q4_1, Q.BF16, Q.Q4_0]
    for k, (hf, gg) in enumerate(sorted(names.items(), key=lambda kv: kv[1])):
        x = rng.standard_normal(shapes[hf]).astype(np.float32)
        if hf.endswith("norm.weight"):
            x = 1.0 + 0.1 * x
        if permute and ".q_proj." in hf:
            x = permute_hf_to_gguf(x, spec["heads"])
        if permute and ".k_proj." in hf:
            x = permute_hf_to_gguf(x, spec["kv"])
        qt = Q.F32 if x.ndim == 1 else kinds[k % len(kinds)]
        if qt == Q.F32:
            w.add_tensor(gg, x)
            stored = x
        elif qt == Q.F16:
            w.add_tensor(gg, x.astype(np.float16))
            stored = x.astype(np.float16).astype(np.float32)
        else:
            qx = gguf.quants.quantize(x, qt)
            w.add_tensor(gg, qx, raw_dtype=qt)
            stored = gguf.quants.dequantize(qx, qt).astype(np.float32)
        if permute and (".q_proj." in hf or ".k_proj." in hf):
            n = spec["heads"] if ".q_proj." in hf else spec["kv"]
            stored = stored.reshape(n, stored.shape[0] // n // 2, 2, *stored.shape[1:]) \
                           .swapaxes(1, 2).reshape(stored.shape)
        expected[hf] = stored
    if spec["rope"]:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(hd, spec["theta"], spec["rope"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, expected


def tiny_golden():
    from transformers import AutoConfig  # noqa: F401  (fail early without transformers)

    out = {}
    for seed, (name, spec) in enumerate(TINY.items()):
        path, expected = make_tiny(name, spec, seed + 1)
        model = load_with_transformers(path)
        got = tensors_of(model)
        # Two independent routes must agree, or transformers silently initialised something.
        assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))
        for n, t in got.items():
            assert np.array_equal(t, expected[n]), n
        facts = config_facts(model.config)
        # transformers' GGUF loader drops rope_freqs: the llama3 parameters are what we wrote.
        if spec["rope"]:
            facts["rope_type"] = "llama3"
            for k, v in spec["rope"].items():
                facts["rope_" + k] = v
        facts["head_dim"] = spec["head_dim"]
        tensors = {n: {"shape": list(t.shape), "crc32_f32": crc(t), "samples": samples(t)}
                   for n, t in tensors_of(model).items()}
        out[name] = {"file": os.path.basename(path), "config": facts, "tensors": tensors,
                     "qkv_bias": spec["bias"], "qk_norm": spec["qk_norm"]}
        print("%s: %d tensors, %d bytes" % (name, len(tensors), os.path.getsize(path)))
    with open(os.path.join(OUT, "tiny.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


# ---------------------------------------------------------------- config.json files

def configs_golden():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    cases = {
        "llama3": LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                              max_position_embeddings=131072, rms_norm_eps=1e-5,
                              rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                                   low_freq_factor=1.0, high_freq_factor=4.0,
                                                   original_max_position_embeddings=8192),
                              bos_token_id=128000, eos_token_id=[128001, 128008, 128009]),
        "tinyllama": LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                 num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                                 max_position_embeddings=2048, rms_norm_eps=1e-5),
        "mistral": MistralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                                 rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                                 sliding_window=None),
        "qwen2": Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                             num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                             tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        "qwen3": Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                             num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                             vocab_size=151936, tie_word_embeddings=True),
    }
    out = {"source": "transformers %s" % __import__("transformers").__version__, "configs": {}}
    for name, cfg in cases.items():
        with tempfile.TemporaryDirectory() as d:
            cfg.save_pretrained(d)
            saved = json.load(open(os.path.join(d, "config.json")))
        out["configs"][name] = {"config_json": saved, "expected": config_facts(cfg)}
    # llama3 rope factors (what convert_hf_to_gguf.py stores as rope_freqs.weight) for a
    # non-default parameter set, from transformers' rope init.
    out["rope_freqs"] = []
    for hd, theta, rs in [(128, 500000.0, dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                               original_max_position_embeddings=8192)),
                          (64, 10000.0, dict(factor=4.0, low_freq_factor=1.0, high_freq_factor=2.0,
                                             original_max_position_embeddings=1024))]:
        out["rope_freqs"].append({"head_dim": hd, "rope_theta": theta, "rope_scaling": rs,
                                  "factors": [float(x) for x in llama3_rope_factors(hd, theta, rs)]})
    with open(os.path.join(OUT, "configs.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("configs: %d" % len(cases))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--skip-model", action="store_true")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    configs_golden()
    tiny_golden()
    if not args.skip_model:
        smollm2_golden(args.model)


if __name__ == "__main__":
    sys.exit(main())
