#!/usr/bin/env python3
"""The transformers anchor of `eval-ppl --device cuda`: AutoModelForCausalLM in bf16 on
the GPU, llama.cpp's method (chunks of --ctx tokens, the first replaced by BOS when the tokenizer
adds one, logits of positions ctx/2 … ctx−2 scoring the next token), --batch chunks per forward,
NLL summed in float64.

  python3 scripts/hf_ppl_cuda.py --model HF_DIR --text wiki.test.raw [--ctx 512] [--batch 8] [--chunks N]
      [--device-map [cuda|auto]]

Prints the token count, PPL, evaluation tokens/s, load and evaluation seconds, and the seconds
since the interpreter started (import torch included), so the whole process can be compared.
--device-map auto spreads the layers over every visible GPU (accelerate's device_map="auto": a model
larger than one GPU, its layers run one device after the other).
"""
import argparse
import math
import time

T_START = time.time()

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("--device-map", nargs="?", const="cuda", choices=["cuda", "auto"],
                    help="load straight onto the GPU (device_map='cuda', the default of the bare flag) or over "
                         "every GPU (device_map='auto') instead of loading on the CPU, then .cuda()")
    a = ap.parse_args()
    t_import = time.time()

    tok = AutoTokenizer.from_pretrained(a.model)
    text = open(a.text, encoding="utf-8").read()
    ids = tok(text, add_special_tokens=True)["input_ids"]
    bos = tok.bos_token_id
    adds_bos = bos is not None and len(ids) > 0 and ids[0] == bos
    if a.device_map:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, device_map=a.device_map).eval()
    else:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda().eval()
    torch.cuda.synchronize()
    t_loaded = time.time()

    ctx, first = a.ctx, a.ctx // 2
    n_chunks = len(ids) // ctx
    if a.chunks >= 0:
        n_chunks = min(n_chunks, a.chunks)
    data = torch.tensor(ids[: n_chunks * ctx], dtype=torch.long).view(n_chunks, ctx)
    inputs = data.clone()
    if adds_bos:
        inputs[:, 0] = bos
    total, count = 0.0, 0
    torch.cuda.synchronize()
    t0 = time.time()
    with torch.inference_mode():
        for c0 in range(0, n_chunks, a.batch):
            x = inputs[c0: c0 + a.batch].cuda(non_blocking=True)
            logits = model(x, logits_to_keep=ctx - first).logits[:, :-1].float()
            y = data[c0: c0 + a.batch, first + 1:].to(logits.device)  # the last layer's GPU under "auto"
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                    reduction="none")
            total += nll.double().sum().item()
            count += nll.numel()
    torch.cuda.synchronize()
    t1 = time.time()
    ev = t1 - t0
    print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count() if a.device_map == 'auto' else 1}, "
          f"device_map {a.device_map}, experts {getattr(model.config, '_experts_implementation', None)}")
    print(f"tokens {len(ids)} (BOS per chunk: {adds_bos}), {n_chunks} chunks of {ctx}, batch {a.batch}, "
          f"{count} scored")
    print(f"PPL {math.exp(total / count):.4f}")
    print(f"eval {ev:.2f} s, {n_chunks * ctx / ev:.0f} tok/s; load {t_loaded - t_import:.2f} s; "
          f"import {t_import - T_START:.2f} s; since start {t1 - T_START:.2f} s")


if __name__ == "__main__":
    main()
