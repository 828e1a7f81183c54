#!/usr/bin/env python3
"""Golden numbers for tests/test_eval.cpp.

Run:  python3 tests/golden/make_ppl_golden.py   (numpy, torch, transformers)

1. tests/golden/ppl/smollm2_q4_1_protocols.json — both perplexity protocols
   (docs/spec/perplexity.md) computed with transformers' fp32 model of
   models/SmolLM2-135M-Instruct.Q4_1.gguf (loaded by transformers itself from the GGUF):
   - "llama": the first 4 chunks of 512 tokens of wiki.test.raw (no BOS: SmolLM2 adds none),
     logits of positions 256..510 scoring tokens 257..511 of each chunk, llama-perplexity's
     running [i] estimates and its final PPL ± error formula.
   - "chunks": the first chunk of 2048 tokens of wiki.test.joined.txt, every token after the first
     scored (GPTQ's llama_eval).
   The token ids are stored (4·512 and 2·2048 of them: our evaluator refuses texts shorter than
   2·ctx) so the test needs no tokenizer; the wiki.test.raw ids are checked against llama.cpp's
   own tokenization when LLAMA_IDS names a file of llama-tokenize's ids (a Python list).

2. tests/golden/ppl/kld_synthetic.json — the KL-divergence statistics of llama.cpp's
   --kl-divergence summary (docs/spec/perplexity.md §KL divergence) for synthetic logits that
   C++ regenerates bit for bit (integer hash → float32), computed with
   torch.nn.functional.kl_div (per-token KL over the full vocabulary), numpy percentiles (linear
   interpolation at fraction·(n−1), numpy's default) and llama.cpp's uncertainty formulas
   (tools/perplexity/perplexity.cpp).
"""
import ast
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(HERE, "ppl")
GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
WIKI = os.path.join(ROOT, "data", "wikitext-2")
os.makedirs(OUT, exist_ok=True)
torch.set_num_threads(max(1, os.cpu_count() or 1))


def prefix_ids(tok, path, n):
    """First n ids of the whole file's tokenization, from a prefix long enough to be stable."""
    text = open(path, encoding="utf-8").read()
    k = 8 * n
    while True:
        a = tok(text[:k], add_special_tokens=True)["input_ids"]
        b = tok(text[:2 * k], add_special_tokens=True)["input_ids"]
        if len(a) > n + 64 and a[:n] == b[:n]:
            return a[:n]
        k *= 2


def nll_rows(model, ids, first):
    """-log softmax(logits[p])[ids[p+1]] for p = first .. len(ids)-2, in float64."""
    with torch.no_grad():
        lg = model(torch.tensor([ids]), use_cache=False).logits[0].double()
    lp = torch.log_softmax(lg, dim=-1)
    tgt = torch.tensor(ids[first + 1:])
    return (-lp[first:-1].gather(1, tgt[:, None])[:, 0]).numpy()


def protocol_stats(nlls_per_chunk):
    s = s2 = 0.0
    n = 0
    running = []
    for v in nlls_per_chunk:
        s += float(v.sum()); s2 += float((v * v).sum()); n += len(v)
        running.append(float(np.exp(s / n)))
    m = s / n
    var = s2 / n - m * m
    ppl = float(np.exp(m))
    return {"count": n, "sum_nll": s, "sum_nll2": s2, "mean_nll": m, "ppl": ppl,
            "ppl_err": float(np.sqrt(var / (n - 1)) * ppl), "running": running}


def protocols():
    d, f = os.path.split(GGUF)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    raw = prefix_ids(tok, os.path.join(WIKI, "wiki.test.raw"), 4 * 512)
    ref = os.environ.get("LLAMA_IDS", "")
    if ref and os.path.exists(ref):
        assert ast.literal_eval(open(ref).read())[:len(raw)] == raw, "ids differ from llama.cpp's"
        print("wiki.test.raw ids equal llama.cpp's llama-tokenize output")
    llama = protocol_stats([nll_rows(model, raw[i * 512:(i + 1) * 512], 256) for i in range(4)])
    joined = prefix_ids(tok, os.path.join(WIKI, "wiki.test.joined.txt"), 2 * 2048)
    chunks = protocol_stats([nll_rows(model, joined[:2048], 0)])
    out = {"made_by": "tests/golden/make_ppl_golden.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "model_file": os.path.basename(GGUF),
           "llama": dict(llama, ctx=512, chunks=4, text="wiki.test.raw", ids=raw),
           "chunks": dict(chunks, ctx=2048, chunks=1, text="wiki.test.joined.txt", ids=joined)}
    with open(os.path.join(OUT, "smollm2_q4_1_protocols.json"), "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
    print("llama 4x512: PPL %.6f ± %.6f; chunks 1x2048: PPL %.6f" % (llama["ppl"], llama["ppl_err"], chunks["ppl"]))


# --- synthetic KLD ---------------------------------------------------------------------------
# Must match synthetic_logits() in tests/test_eval.cpp exactly: a 32-bit integer hash of
# (row, v, salt) mapped to [-1, 1), scaled; everything exactly representable in float32.
N_ROWS, N_VOCAB = 300, 1000


def hash32(x):
    x = np.uint32(x)
    x = np.uint32((x ^ (x >> np.uint32(16))) * np.uint32(0x7feb352d))
    x = np.uint32((x ^ (x >> np.uint32(15))) * np.uint32(0x846ca68b))
    return np.uint32(x ^ (x >> np.uint32(16)))


def synthetic_logits(salt):
    r = np.arange(N_ROWS, dtype=np.uint32)[:, None]
    v = np.arange(N_VOCAB, dtype=np.uint32)[None, :]
    with np.errstate(over="ignore"):
        h = hash32(r * np.uint32(1000003) + v * np.uint32(7919) + np.uint32(salt))
    # 24-bit fraction → exact float32 in [-1, 1), times 8
    return ((h >> np.uint32(8)).astype(np.float32) / np.float32(1 << 23) - np.float32(1.0)) * np.float32(8.0)


def kld():
    base = synthetic_logits(1)
    test = (base + synthetic_logits(2) * np.float32(0.125)).astype(np.float32)
    with np.errstate(over="ignore"):
        targets = [int(t) for t in hash32(np.arange(N_ROWS, dtype=np.uint32) * np.uint32(2654435761)) % N_VOCAB]
    lb = torch.log_softmax(torch.tensor(base, dtype=torch.float64), -1)
    lt = torch.log_softmax(torch.tensor(test, dtype=torch.float64), -1)
    # kl_div(input=log q, target=log p, log_target=True) = Σ p (log p − log q) per row
    kl = F.kl_div(lt, lb, log_target=True, reduction="none").sum(-1).numpy()
    t = torch.tensor(targets)
    nll = (-lt.gather(1, t[:, None])[:, 0]).numpy()
    nllb = (-lb.gather(1, t[:, None])[:, 0]).numpy()
    same = (lb.argmax(-1) == lt.argmax(-1)).numpy()
    dp = np.exp(-nll) - np.exp(-nllb)
    n = N_ROWS

    def me(x):  # mean and llama.cpp's uncertainty
        m = x.mean()
        return float(m), float(np.sqrt((np.mean(x * x) - m * m) / (n - 1)))

    def cov(a, b):
        return float((np.mean(a * b) - a.mean() * b.mean()) / (n - 1))

    lp, lpe = me(nll)
    lbm, lbe = me(nllb)
    c = cov(nll, nllb)
    lr = lp - lbm
    lre = float(np.sqrt(lpe ** 2 + lbe ** 2 - 2 * c))
    ppl, pplb = float(np.exp(lp)), float(np.exp(lbm))
    msq, msqe = me(dp * dp)
    rms = float(np.sqrt(msq))
    pct = lambda x, f: float(np.percentile(x.astype(np.float32).astype(np.float64), 100 * f))
    same_p = float(same.mean())
    out = {
        "made_by": "tests/golden/make_ppl_golden.py", "rows": N_ROWS, "vocab": N_VOCAB,
        "targets": targets,
        "ppl": ppl, "ppl_err": ppl * lpe, "ppl_base": pplb, "ppl_base_err": pplb * lbe,
        "cor": c / (lpe * lbe), "ln_ratio": lr, "ln_ratio_err": lre,
        "ratio": float(np.exp(lr)), "ratio_err": float(np.exp(lr)) * lre,
        "diff": ppl - pplb,
        "diff_err": float(np.sqrt((ppl * lpe) ** 2 + (pplb * lbe) ** 2 - 2 * ppl * pplb * c)),
        "kld": me(kl)[0], "kld_err": me(kl)[1],
        "kld_max": float(kl.max()), "kld_min": float(kl.min()),
        "kld_median": float(np.median(kl.astype(np.float32).astype(np.float64))),
        "kld_p99": pct(kl, 0.99), "kld_p90": pct(kl, 0.90), "kld_p10": pct(kl, 0.10),
        "kld_p999": pct(kl, 0.999), "kld_p1": pct(kl, 0.01),
        "dp": me(dp)[0], "dp_err": me(dp)[1], "dp_p75": pct(dp, 0.75), "dp_p25": pct(dp, 0.25),
        "dp_median": float(np.median(dp.astype(np.float32).astype(np.float64))),
        "rms_dp": rms, "rms_dp_err": 0.5 / rms * msqe,
        "same_top": same_p, "same_top_err": float(np.sqrt(same_p * (1 - same_p) / (n - 1))),
        "kl_first_rows": [float(x) for x in kl[:5]],
    }
    with open(os.path.join(OUT, "kld_synthetic.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    print("synthetic KLD mean %.6f, same top %.4f" % (out["kld"], same_p))


kld()
protocols()
