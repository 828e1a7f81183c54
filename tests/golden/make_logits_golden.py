#!/usr/bin/env python3
"""Golden logits for tests/test_model.cpp, computed by Hugging Face transformers (fp32, CPU).

Run:  python3 tests/golden/make_logits_golden.py [MODEL.gguf] [wiki.test.raw]
      (defaults: models/SmolLM2-135M-Instruct.Q4_1.gguf, data/wikitext-2/wiki.test.raw)

transformers loads the GGUF itself (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)):
it dequantizes with gguf-py and un-permutes the Q/K rows on its own, so nothing of quanttool is
involved. The token ids are the first 512 ids of the text as the same GGUF's tokenizer (through
transformers, add_special_tokens=False: SmolLM2 adds no BOS) produces them; the script checks
them against llama.cpp's tokenization when LLAMA_IDS names a file of its ids (a Python list).

Writes tests/golden/logits/smollm2_q4_1_wiki512.json with
  ids            the 512 input ids (position p predicts ids[p+1])
  nll            -log softmax(logits[p])[ids[p+1]] for p = 0..510, and their mean (mean_nll)
  max_logit, lse per-position max and log-sum-exp over the full vocabulary (512 each)
  logit_sum      per-position sum of all 49152 logits (a checksum of the whole row)
  top5           ids and logits of the 5 largest logits at a dozen positions
  samples        4096 (position, vocab id, logit) triples drawn at random

It also writes three tiny random models as Hugging Face folders (transformers' save_pretrained:
config.json + model.safetensors in bf16) with transformers' fp32 logits on 12 random tokens,
tests/golden/logits/tiny-{llama3,qwen2,qwen3}/logits.json — the features SmolLM2 does not have:
llama3 RoPE scaling + GQA + untied head, qwen2 q/k/v biases + tied head, qwen3 per-head q/k
RMSNorm with head_dim != hidden/heads.
"""
import ast
import hashlib
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config, Qwen3Config

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
gguf_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
text_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "data", "wikitext-2", "wiki.test.raw")
OUT = os.path.join(HERE, "logits", "smollm2_q4_1_wiki512.json")
N = 512

torch.manual_seed(0)
torch.set_num_threads(max(1, os.cpu_count() or 1))
d, f = os.path.split(os.path.abspath(gguf_path))
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32,
                                             attn_implementation="eager")
model.eval()

# Tokenizing the whole 1.3 MB file is slow in the slow path; the first 8 KB give > 512 tokens and
# the same prefix (BPE never merges across the pre-tokenizer's splits, which happen well before).
with open(text_path, "r", encoding="utf-8") as fh:
    text = fh.read()
ids = tok(text[:8192], add_special_tokens=False)["input_ids"][:N]
assert len(ids) == N
ref = os.environ.get("LLAMA_IDS", "")  # llama.cpp's ids of the same text, a Python list literal
if ref and os.path.exists(ref):
    lc = ast.literal_eval(open(ref).read())[:N]
    assert lc == ids, "transformers and llama.cpp tokenize the text differently"
    print("ids equal llama.cpp's llama-tokenize output")

with torch.no_grad():
    logits = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()  # [N, V]
V = logits.shape[1]
l64 = logits.astype(np.float64)
mx = l64.max(axis=1)
lse = mx + np.log(np.exp(l64 - mx[:, None]).sum(axis=1))
nll = [float(lse[p] - l64[p, ids[p + 1]]) for p in range(N - 1)]

rng = np.random.default_rng(512)
positions = [0, 1, 2, 7, 31, 63, 127, 255, 256, 383, 500, 511]
top5 = []
for p in positions:
    idx = np.argsort(-logits[p], kind="stable")[:5]
    top5.append({"pos": p, "ids": [int(i) for i in idx], "logits": [float(logits[p, i]) for i in idx]})
sp = rng.integers(0, N, 4096)
sv = rng.integers(0, V, 4096)
samples = [[int(p), int(v), float(logits[p, v])] for p, v in zip(sp, sv)]

sha = hashlib.sha256(open(gguf_path, "rb").read()).hexdigest()
out = {
    "made_by": "tests/golden/make_logits_golden.py",
    "model_file": os.path.basename(gguf_path),
    "model_sha256": sha,
    "text": "wiki.test.raw, first %d tokens, no BOS" % N,
    "transformers": transformers.__version__,
    "torch": torch.__version__,
    "vocab": int(V),
    "ids": [int(i) for i in ids],
    "mean_nll": float(np.mean(nll)),
    "nll": nll,
    "max_logit": [float(x) for x in mx],
    "lse": [float(x) for x in lse],
    "logit_sum": [float(x) for x in l64.sum(axis=1)],
    "top5": top5,
    "samples": samples,
}
os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "w") as fh:
    json.dump(out, fh, separators=(",", ":"))
print("wrote", OUT, "mean_nll", out["mean_nll"], "ppl", float(np.exp(out["mean_nll"])))


# ---- tiny models ------------------------------------------------------------------------------
TINY = {
    "llama3": LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          rms_norm_eps=1e-5, tie_word_embeddings=False,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64}),
    "qwen2": Qwen2Config(vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=512,
                         rms_norm_eps=1e-6, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    "qwen3": Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
}
g = torch.Generator().manual_seed(1234)
for name, cfg in TINY.items():
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif pname.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:  # large enough that attention and the MLP matter
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5) * 1.5)
            p.copy_(p.to(torch.bfloat16).float())  # what the bf16 file will hold
    tiny_ids = torch.randint(0, cfg.vocab_size, (12,), generator=g)
    with torch.no_grad():
        lg = m(tiny_ids[None], use_cache=False).logits[0].float().numpy()
    d = os.path.join(HERE, "logits", "tiny-" + name)
    m.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    with open(os.path.join(d, "logits.json"), "w") as fh:
        json.dump({"made_by": "tests/golden/make_logits_golden.py", "arch": cfg.model_type,
                   "transformers": transformers.__version__, "ids": [int(i) for i in tiny_ids],
                   "logits": [float(x) for x in lg.reshape(-1)]}, fh, separators=(",", ":"))
    print("wrote", d)
