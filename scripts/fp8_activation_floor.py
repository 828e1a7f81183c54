#!/usr/bin/env python3
"""What FP8_DYNAMIC's activation rounding alone costs a model, independently of our C++ code.

FP8_DYNAMIC (compressed-tensors' preset, llm-compressor) rounds every Linear's input to E4M3 per
token at run time: s = absmax(row) / 448, x -> E4M3(x / s) * s (compressed-tensors
quantization/lifecycle/forward.py, `_quantize` with a dynamic token strategy). That rounding's cost
with the weights kept exact bounds every FP8_DYNAMIC model of this checkpoint from below, for a
given smoothing: a weight method (GPTQ, scale search) only adds the weights' own error. SmoothQuant
(Xiao et al. 2023, eq. 4: s_j = max|X_j|^a / max|W_j|^(1-a)) moves range between a Linear's input
channels and its weight columns; the `act@A` variants fold it (alpha A, statistics from --calib) into
the norms and the weights, exactly as far as fp32 goes, before rounding the activations.

Runs in torch (fp32 CPU), llama.cpp's perplexity protocol as `quanttool eval-ppl --method llama`
runs it: chunks of --ctx tokens, logits of positions ctx/2 .. ctx-2 score the next token; KLD over
the whole vocabulary against the unrounded model at the same positions. Variants:
  act     activations E4M3 per token, weights exact
  act@A   the same after SmoothQuant with alpha A on the q|k|v, gate|up and down_proj inputs (the
          down_proj factors folded into up_proj's rows; o_proj is left alone: with grouped-query
          attention one value channel feeds several of its inputs)
  weight  weights E4M3 per output channel (absmax/448, round to nearest), activations exact
  both    both: FP8_DYNAMIC round to nearest, which `quanttool convert --scheme fp8` + eval-ppl
          measure with our kernels (a check of this emulation against that figure)
The output head stays unrounded, as `convert --scheme fp8` leaves it (FP8_DYNAMIC's ignore list).

  python scripts/fp8_activation_floor.py --model HF_FOLDER --ids IDS --calib-ids CIDS --chunks 64 \
      --variants act,act@0.5,weight,both
IDS / CIDS: `quanttool tokenize --model M --text data/wikitext-2/wiki.test.raw --out IDS` (one id a
line; CIDS from wiki.valid.tokens.txt, the calibration text).
Needs torch >= 2.1 (float8_e4m3fn) and transformers; never run in CI.
"""
import argparse
import json
import math

import torch
from transformers import AutoModelForCausalLM

E4M3_MAX = 448.0


def e4m3(x, dim):
    """Rounds x to E4M3 with one scale absmax/448 per slice along `dim` (kept dims)."""
    s = x.abs().amax(dim=dim, keepdim=True).clamp_min(1e-12) / E4M3_MAX
    return (x / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(x.dtype) * s


def smooth_stats(model, a):
    """Per decoder layer, max |x| per input channel of q_proj, gate_proj and down_proj over the
    calibration chunks (unrounded model)."""
    ids = [int(t) for t in open(a.calib_ids).read().split()]
    amax, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        for name, lin in (("qkv", layer.self_attn.q_proj), ("gu", layer.mlp.gate_proj), ("down", layer.mlp.down_proj)):
            def hook(mod, args, key=(i, name)):
                m = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0)
                amax[key] = torch.maximum(amax[key], m) if key in amax else m
            hooks.append(lin.register_forward_pre_hook(hook))
    with torch.no_grad():
        for c in range(min(a.calib_chunks, len(ids) // a.ctx)):
            model(torch.tensor([ids[c * a.ctx : (c + 1) * a.ctx]]))
    for h in hooks:
        h.remove()
    return amax


def smooth(model, amax, alpha):
    """SmoothQuant's factors folded into the norms (q|k|v, gate|up) and into up_proj (down_proj)."""
    for i, layer in enumerate(model.model.layers):
        at, mlp = layer.self_attn, layer.mlp
        groups = (
            ("qkv", [at.q_proj, at.k_proj, at.v_proj], lambda s: layer.input_layernorm.weight.data.div_(s)),
            ("gu", [mlp.gate_proj, mlp.up_proj], lambda s: layer.post_attention_layernorm.weight.data.div_(s)),
            ("down", [mlp.down_proj], lambda s: mlp.up_proj.weight.data.div_(s[:, None])),
        )
        for key, lins, fold in groups:
            w = torch.cat([l.weight.data for l in lins]).abs().amax(0).clamp_min(1e-5)
            s = (amax[(i, key)].clamp_min(1e-5).pow(alpha) / w.pow(1 - alpha)).clamp_min(1e-5)
            fold(s)
            for l in lins:
                l.weight.data.mul_(s[None, :])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--bos", type=int, default=-1, help="BOS id to put first in each chunk (-1: none)")
    ap.add_argument("--variants", default="act,weight,both")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calib-ids", help="token ids of the calibration text (for act@A)")
    ap.add_argument("--calib-chunks", type=int, default=16)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ids = [int(t) for t in open(a.ids).read().split()]
    n = min(a.chunks, len(ids) // a.ctx)
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32).eval()
    linears = [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in name]
    exact = [m.weight.data.clone() for m in linears]

    def logits_of(chunk):
        with torch.no_grad():
            out = model(torch.tensor([chunk])).logits[0]
        return out[a.ctx // 2 : a.ctx - 1].double()

    norms = {n: m.weight.data.clone() for n, m in model.named_modules() if n.endswith("layernorm")}
    stats = smooth_stats(model, a) if any(v.startswith("act@") for v in a.variants.split(",")) else None

    def setup(variant):
        hooks = []
        for m, w in zip(linears, exact):
            m.weight.data = e4m3(w, 1) if variant in ("weight", "both") else w.clone()
            if variant.startswith("act") or variant == "both":
                hooks.append(m.register_forward_pre_hook(lambda mod, args: (e4m3(args[0], -1),)))
        for n, m in model.named_modules():
            if n in norms:
                m.weight.data = norms[n].clone()
        if variant.startswith("act@"):
            smooth(model, stats, float(variant[4:]))
        return hooks

    chunks = []
    for c in range(n):
        chunk = ids[c * a.ctx : (c + 1) * a.ctx]
        if a.bos >= 0:
            chunk[0] = a.bos
        chunks.append(chunk)
    variants = [v for v in a.variants.split(",") if v]
    base_nll, sums = 0.0, {v: [0.0, 0.0, 0, 0.0] for v in variants}  # kld, kld², same-top, nll
    count = 0
    for ci, chunk in enumerate(chunks):
        for h in setup("none"):
            h.remove()
        lb = logits_of(chunk)
        lpb = torch.log_softmax(lb, -1)
        tgt = torch.tensor(chunk[a.ctx // 2 + 1 :])
        base_nll += float(-lpb[torch.arange(len(tgt)), tgt].sum())
        count += len(tgt)
        for v in variants:
            hooks = setup(v)
            lq = logits_of(chunk)
            for h in hooks:
                h.remove()
            lpq = torch.log_softmax(lq, -1)
            kl = (lpb.exp() * (lpb - lpq)).sum(-1)
            s = sums[v]
            s[0] += float(kl.sum())
            s[1] += float((kl * kl).sum())
            s[2] += int((lb.argmax(-1) == lq.argmax(-1)).sum())
            s[3] += float(-lpq[torch.arange(len(tgt)), tgt].sum())
        line = " ".join(f"{v} {sums[v][0] / count:.5f}" for v in variants)
        print(f"chunk {ci + 1}/{n}: base PPL {math.exp(base_nll / count):.4f}  KLD {line}", flush=True)
    res = {"chunks": n, "ctx": a.ctx, "tokens": count, "base_ppl": math.exp(base_nll / count)}
    for v in variants:
        kld, kld2, same, nll = sums[v]
        mean = kld / count
        err = math.sqrt(max(kld2 / count - mean * mean, 0.0) / (count - 1))
        res[v] = {"kld": mean, "kld_err": err, "same_top_pct": 100.0 * same / count, "ppl": math.exp(nll / count)}
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
