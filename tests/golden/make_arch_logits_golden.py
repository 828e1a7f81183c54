#!/usr/bin/env python3
"""Golden logits of tiny random models of the architectures listed below, computed by Hugging
Face transformers itself (fp32, CPU, eager attention). Sibling of make_logits_golden.py, same
recipe: transformers builds each model from a config (AutoModelForCausalLM.from_config, no
download), random weights rounded to bf16, saved with save_pretrained (config.json +
model.safetensors in bf16), and its fp32 logits on N random tokens.

Run:  python tests/golden/make_arch_logits_golden.py [--only NAME,NAME]
      (a venv with torch, transformers, safetensors, numpy). --only remakes just those models;
      each model's random numbers come from its own generator seed, so one model's golden does not
      depend on which others were made in the same run (the first four share the original one).

Writes tests/golden/logits/tiny-<name>/{config.json, model.safetensors, logits.json}:
  gemma2   head_dim 256, query_pre_attn_scalar != head_dim, attention-logit and final-logit
           soft-capping (small caps so that tanh bends them), sliding window 4 on layers 0 and
           2 (1 is global), tied head, √hidden not a float-exact number
  gemma3   Gemma3ForCausalLM (gemma3_text): head_dim 256, q/k norms, sliding_window 5 with
           sliding_window_pattern 3 (layers 0, 1 slide, 2 is global), local RoPE base 10000
           and a linear RoPE scaling (factor 8) on the global layer only
  falcon3  LlamaForCausalLM as Falcon3 configures it: explicit head_dim 256 (≠ hidden/heads
           here), rope_theta 1000042, GQA, untied head
  phi3     Phi3ForCausalLM: fused qkv_proj (GQA: 4 heads, 2 kv heads) and gate_up_proj, a
           sliding_window of 6 on every layer (Phi-3-mini-4k has 2047), untied head
  olmo2    Olmo2ForCausalLM: norms after attention and after the MLP only (none before), q/k
           RMSNorm over the whole projection (n_heads·head_dim), GQA, untied head
  smollm3  SmolLM3ForCausalLM: no RoPE on the second layer (no_rope_layers [1, 0]; the real models
           leave every 4th layer without), GQA, tied head
  qwen3-moe  Qwen3MoeForCausalLM: 3 layers, the middle one dense (mlp_only_layers [1]), 4 experts
           of 48 rows, top 2 without renormalising (norm_topk_prob false), q/k norms, head_dim 32
  mixtral  MixtralForCausalLM: 2 layers, 4 experts of 48 rows, top 2 renormalised, head_dim 32
Each sequence has 16 tokens, longer than every sliding window. logits.json also holds
ppl_chunks_ctx8: the mean NLL of eval-ppl's "chunks" protocol at ctx 8 (two chunks of 8 tokens,
each from an empty cache, every token but a chunk's first scored), from transformers' logits.
"""
import json
import os

import torch
import transformers
import argparse

from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, LlamaConfig, MixtralConfig,
                          Olmo2Config, Phi3Config, Qwen3MoeConfig, SmolLM3Config)

HERE = os.path.dirname(os.path.abspath(__file__))
N = 16

TINY = {
    "gemma2": Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                           query_pre_attn_scalar=144, max_position_embeddings=512, rms_norm_eps=1e-6,
                           attn_logit_softcapping=3.0, final_logit_softcapping=6.0, sliding_window=4,
                           tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "gemma3": Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                               query_pre_attn_scalar=256, max_position_embeddings=512, rms_norm_eps=1e-6,
                               sliding_window=5, sliding_window_pattern=3, tie_word_embeddings=True,
                               pad_token_id=0, bos_token_id=2, eos_token_id=1,
                               rope_parameters={
                                   "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    "falcon3": LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                           max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000042.0}),
    "phi3": Phi3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                       original_max_position_embeddings=512, rms_norm_eps=1e-5, sliding_window=6,
                       tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "olmo2": Olmo2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         rms_norm_eps=1e-6, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "smollm3": SmolLM3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             no_rope_layers=[1, 0],
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                             rms_norm_eps=1e-6, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1,
                             eos_token_id=2, rope_parameters={"rope_type": "default", "rope_theta": 2000000.0}),
    # head_dim 32: the quantized KV codecs' smallest
    "qwen3-moe": Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=48,
                                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1],
                                max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    "mixtral": MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
                             num_experts_per_tok=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                             tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
}
# Models added after the first four draw from their own generator (see --only).
OWN_SEED = {"olmo2": 5001, "smollm3": 5002, "qwen3-moe": 5003, "mixtral": 5004}


def router_margin(model, ids):
    """The smallest gap, over tokens and sparse layers, between the k-th and the (k+1)-th router
    probability: a golden whose top-k choice a rounding could flip would not test the engine."""
    gaps = []
    hooks = []
    for mod in model.modules():
        if type(mod).__name__.endswith("TopKRouter"):
            def hook(m, inp, out):
                p = torch.softmax(out[0].float(), dim=-1).sort(dim=-1, descending=True).values
                gaps.append(float((p[:, m.top_k - 1] - p[:, m.top_k]).min()))
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        model(ids[None], use_cache=False)
    for h in hooks:
        h.remove()
    return min(gaps) if gaps else None

ap = argparse.ArgumentParser()
ap.add_argument("--only", default="", help="comma-separated names to (re)make")
args = ap.parse_args()
only = set(filter(None, args.only.split(",")))

torch.manual_seed(0)
g = torch.Generator().manual_seed(4321)
for name, cfg in TINY.items():
    if only and name not in only:
        continue
    if name in OWN_SEED:
        g = torch.Generator().manual_seed(OWN_SEED[name])
    elif only:
        raise SystemExit("--only: the first four models share one generator; remake them all together")
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if pname.endswith("norm.weight"):
                # Gemma's norms scale by 1 + w (w near 0); the others by w (near 1)
                base = 0.0 if name.startswith("gemma") else 1.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
            elif pname.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:  # large enough that attention and the MLP matter
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5) * 1.5)
            p.copy_(p.to(torch.bfloat16).float())  # what the bf16 file will hold
    ids = torch.randint(0, cfg.vocab_size, (N,), generator=g)
    margin = router_margin(m, ids)
    if margin is not None:
        print(name, "smallest top-k router margin", margin)
        assert margin > 1e-3, "a near-tie in the router: choose another seed"
    with torch.no_grad():
        lg = m(ids[None], use_cache=False).logits[0].float().numpy()
        nll = []
        for c0 in range(0, N, 8):
            chunk = ids[c0:c0 + 8]
            lc = m(chunk[None], use_cache=False).logits[0].double()
            lp = torch.log_softmax(lc, dim=-1)
            nll += [float(-lp[p, chunk[p + 1]]) for p in range(7)]
    d = os.path.join(HERE, "logits", "tiny-" + name)
    m.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    with open(os.path.join(d, "logits.json"), "w") as fh:
        json.dump({"made_by": "tests/golden/make_arch_logits_golden.py", "arch": cfg.model_type,
                   "transformers": transformers.__version__, "torch": torch.__version__,
                   "ids": [int(i) for i in ids], "ppl_chunks_ctx8": sum(nll) / len(nll), "logits": [float(x) for x in lg.reshape(-1)]},
                  fh, separators=(",", ":"))
    print("wrote", d, "logit range", float(lg.min()), float(lg.max()))
