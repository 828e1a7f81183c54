#!/usr/bin/env python3
"""Mixture-of-experts GGUFs as llama.cpp writes them (tests/test_gguf_moe.cpp).

Run:  LLAMA_QUANTIZE=/path/llama-quantize PYTHONPATH=<llama.cpp>/gguf-py \
        python3 tests/golden/make_moe_gguf_goldens.py <llama.cpp>
      (torch, transformers, numpy; <llama.cpp> holds convert_hf_to_gguf.py and conversion/)

tests/golden/gguf_moe/tiny-<name>/{config.json, model.safetensors}
    Tiny random models made by transformers from a config (AutoModelForCausalLM.from_config,
    weights drawn as in make_arch_logits_golden.py and rounded to bf16, saved in bf16):
      qwen3moe  Qwen3MoeForCausalLM: 2 layers, both sparse, 4 experts of 32 rows, top 2
                renormalised (llama.cpp's qwen3moe has no dense layers and always renormalises:
                src/models/qwen3moe.cpp), q/k norms, head_dim 16
      mixtral8  MixtralForCausalLM: 2 layers, 8 experts of 32 rows (llama-quantize's n_expert == 8
                rules: attn_v / attn_k in Q8_0, attn_output in Q5_K), top 2, head_dim 8
tests/golden/gguf_moe/tiny-<name>.bf16.gguf
    `convert_hf_to_gguf.py tiny-<name> --outtype bf16`, run in-process, with the vocabulary of
    make_gguf_arch_goldens.py (64 SentencePiece pieces: the tiny folders have no tokenizer). The
    converter stacks each layer's experts into ffn_{gate,up,down}_exps [n_expert, rows, cols]
    (conversion/qwen.py Qwen2MoeModel, conversion/llama.py LlamaModel: mixtral's w1, w3, w2),
    keeps the router ffn_gate_inp in F32, and writes mixtral as architecture "llama".
tests/golden/gguf_moe/tiny-<name>.<type>.gguf
    `llama-quantize tiny-<name>.bf16.gguf OUT <TYPE>` for the types in QUANT below (llama-quantize's
    per-tensor mixes, src/llama-quant.cpp llama_tensor_get_type; with 32 columns every K type
    takes its fallback: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K -> Q4_0).
"""
import json
import os
import shutil
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, MixtralConfig, Qwen3MoeConfig

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gguf_moe")
sys.path.insert(0, HERE)
from make_gguf_arch_goldens import write_tiny_vocab  # noqa: E402

TINY = {
    "qwen3moe": (Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=32,
                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
                                max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), 6001),
    "mixtral8": (MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
                               num_experts_per_tok=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                               tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), 6002),
}
QUANT = {"qwen3moe": ["Q8_0", "Q4_K_M"], "mixtral8": ["Q8_0", "Q4_K_M", "Q2_K", "Q3_K_L"]}


def make_model(name, cfg, seed):
    g = torch.Generator().manual_seed(seed)
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5) * 1.5)
            p.copy_(p.to(torch.bfloat16).float())
    d = os.path.join(OUT, "tiny-" + name)
    m.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    return d


def main():
    lcpp = sys.argv[1]
    sys.path.insert(0, lcpp)
    import convert_hf_to_gguf as conv  # noqa: E402
    import gguf  # noqa: E402
    from conversion import llama, qwen  # noqa: E402

    def set_vocab(self):
        write_tiny_vocab(self, gguf)

    for cls in (llama.LlamaModel, qwen.Qwen3MoeModel):
        cls.set_vocab = set_vocab

    os.makedirs(OUT, exist_ok=True)
    quantize = os.environ.get("LLAMA_QUANTIZE")
    for name, (cfg, seed) in TINY.items():
        d = make_model(name, cfg, seed)
        f = os.path.join(OUT, "tiny-%s.bf16.gguf" % name)
        sys.argv = ["convert_hf_to_gguf.py", d, "--outtype", "bf16", "--outfile", f]
        conv.main()
        if not quantize:
            continue
        for t in QUANT[name]:
            q = os.path.join(OUT, "tiny-%s.%s.gguf" % (name, t.lower()))
            subprocess.run([quantize, f, q, t], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print("wrote", name)


if __name__ == "__main__":
    main()
