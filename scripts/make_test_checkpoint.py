#!/usr/bin/env python3
"""Write a random-weight Hugging Face checkpoint of a named model shape, to test memory, speed and
scale on models of real size without their weights (none are reachable here).

  python3 scripts/make_test_checkpoint.py --shape llama3-8b|smollm2-135m|qwen3-30b-a3b|... --tokenizer-from DIR --out OUT
          [--layers N] [--max-shard-size 5GB] [--seed 0] [--std 0.02] [--workers N] [--also-layers M]

The folder is what transformers' save_pretrained writes for a bf16 model: config.json,
model-0000i-of-0000n.safetensors shards with model.safetensors.index.json (one model.safetensors
when it fits one shard), and the tokenizer files copied from --tokenizer-from (a Hugging Face
folder, e.g. what `quanttool convert --in SmolLM2.gguf --out DIR` writes). The vocabulary size is
the tokenizer's, so the model runs on real text. Weights are N(0, std²) in bf16, norms 1;
deterministic per --seed. Memory: one tensor at a time (the largest, 70B's embedding, ~2 GB).

--workers N writes N shards at once (processes; each shard from its own generator seeded by
(--seed, shard index): other values than the one-stream default, the same for any N > 1).
--also-layers M also writes OUT-M, the same model cut to its first M layers: the shards are cut
per layer (the embedding, each layer, the final norm and head apart) and OUT-M's are hard links
to OUT's, so it takes no disk (one GPU's rate per layer beside a model too large for one).

numpy and the standard library only; no network.
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys
import time

import numpy as np

# Each shape as its published config.json has it (vocabulary replaced by the tokenizer's).
SHAPES = {
    "smollm2-135m": dict(arch="LlamaForCausalLM", model_type="llama", hidden=576, inter=1536, layers=30,
                         heads=9, kv_heads=3, head_dim=64, rope_theta=100000.0, eps=1e-5, tied=True,
                         max_pos=8192, qk_norm=False),
    "llama3-8b": dict(arch="LlamaForCausalLM", model_type="llama", hidden=4096, inter=14336, layers=32,
                      heads=32, kv_heads=8, head_dim=128, rope_theta=500000.0, eps=1e-5, tied=False,
                      max_pos=8192, qk_norm=False),
    "qwen3-8b": dict(arch="Qwen3ForCausalLM", model_type="qwen3", hidden=4096, inter=12288, layers=36,
                     heads=32, kv_heads=8, head_dim=128, rope_theta=1000000.0, eps=1e-6, tied=False,
                     max_pos=40960, qk_norm=True),
    # Qwen/Qwen3-30B-A3B: every layer sparse, 128 experts of 768 rows, top 8 renormalised.
    "qwen3-30b-a3b": dict(arch="Qwen3MoeForCausalLM", model_type="qwen3_moe", hidden=2048, inter=6144, layers=48,
                          heads=32, kv_heads=4, head_dim=128, rope_theta=1000000.0, eps=1e-6, tied=False,
                          max_pos=40960, qk_norm=True,
                          moe=dict(experts=128, per_tok=8, inter=768, norm_topk_prob=True)),
    "llama3-70b": dict(arch="LlamaForCausalLM", model_type="llama", hidden=8192, inter=28672, layers=80,
                       heads=64, kv_heads=8, head_dim=128, rope_theta=500000.0, eps=1e-5, tied=False,
                       max_pos=8192, qk_norm=False),
}

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "generation_config.json", "vocab.json", "merges.txt", "tokenizer.model"]


def parse_size(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)", s.strip(), re.I)
    if not m:
        sys.exit(f"error: --max-shard-size {s!r}: expected e.g. 5GB, 500MB, 2GiB")
    unit = m.group(2).upper().rstrip("B")
    mult = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}[unit]
    return int(float(m.group(1)) * mult)


def vocab_size(tok_dir):
    """The tokenizer's vocabulary: config.json's vocab_size when the folder has one, else the
    largest id in tokenizer.json (model vocab and added tokens) + 1."""
    cfg = os.path.join(tok_dir, "config.json")
    if os.path.exists(cfg):
        v = json.load(open(cfg)).get("vocab_size")
        if v:
            return int(v)
    tj = json.load(open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8"))
    ids = list(tj["model"]["vocab"].values()) + [t["id"] for t in tj.get("added_tokens", [])]
    return max(ids) + 1


def tensors(sh, vocab):
    """(name, shape) in the order transformers writes them."""
    h, d, H, KV = sh["hidden"], sh["head_dim"], sh["heads"], sh["kv_heads"]
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(sh["layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (H * d, h)),
                (p + "self_attn.k_proj.weight", (KV * d, h)),
                (p + "self_attn.v_proj.weight", (KV * d, h)),
                (p + "self_attn.o_proj.weight", (h, H * d))]
        if sh["qk_norm"]:
            out += [(p + "self_attn.q_norm.weight", (d,)), (p + "self_attn.k_norm.weight", (d,))]
        out.append((p + "post_attention_layernorm.weight", (h,)))
        moe = sh.get("moe")
        if moe:  # the router, then each expert's projections (Qwen3MoeSparseMoeBlock's names)
            out.append((p + "mlp.gate.weight", (moe["experts"], h)))
            for e in range(moe["experts"]):
                x = f"{p}mlp.experts.{e}."
                out += [(x + "gate_proj.weight", (moe["inter"], h)), (x + "up_proj.weight", (moe["inter"], h)),
                        (x + "down_proj.weight", (h, moe["inter"]))]
        else:
            out += [(p + "mlp.gate_proj.weight", (sh["inter"], h)),
                    (p + "mlp.up_proj.weight", (sh["inter"], h)),
                    (p + "mlp.down_proj.weight", (h, sh["inter"]))]
    out.append(("model.norm.weight", (h,)))
    if not sh["tied"]:
        out.append(("lm_head.weight", (vocab, h)))
    return out


def shard(names_shapes, max_bytes):
    """Greedy in order, as transformers' shard_checkpoint: a new shard when the next tensor would
    overflow this one (a tensor larger than max_bytes gets a shard of its own)."""
    shards, cur, cur_bytes = [], [], 0
    for name, shape in names_shapes:
        nbytes = 2 * int(np.prod(shape))
        if cur and cur_bytes + nbytes > max_bytes:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append((name, shape))
        cur_bytes += nbytes
    if cur:
        shards.append(cur)
    return shards


def shard_groups(names_shapes, max_bytes):
    """Shards that never mix a layer with another or with the tables: each group (the embedding,
    one layer, the final norm with the head) sharded alone."""
    groups, key = [], None
    for name, shape in names_shapes:
        m = re.match(r"model\.layers\.(\d+)\.", name)
        k = int(m.group(1)) if m else ("embed" if "embed" in name else "head")
        if k != key:
            groups.append([])
            key = k
        groups[-1].append((name, shape))
    return [s for g in groups for s in shard(g, max_bytes)]


def shard_layer(items):
    """The layer a per-layer shard holds (-1: the embedding, a large number: the head)."""
    m = re.match(r"model\.layers\.(\d+)\.", items[0][0])
    return int(m.group(1)) if m else (-1 if "embed" in items[0][0] else 1 << 30)


def write_one(args):
    path, items, seed, std = args
    write_shard(path, items, np.random.default_rng(seed), std)
    return path


def bf16_random(rng, n, std, out):
    """n N(0, std²) values as bf16 (round to nearest even) into the uint16 array `out`."""
    step = 1 << 24
    for s in range(0, n, step):
        e = min(n, s + step)
        x = rng.standard_normal(e - s, dtype=np.float32)
        x *= np.float32(std)
        u = x.view(np.uint32)
        u += np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
        out[s:e] = (u >> np.uint32(16)).astype(np.uint16)


def write_shard(path, items, rng, std):
    header, off = {}, 0
    for name, shape in items:
        nbytes = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape in items:
            n = int(np.prod(shape))
            buf = np.empty(n, dtype=np.uint16)
            if name.endswith("norm.weight"):
                buf.fill(0x3F80)  # 1.0 in bf16
            else:
                bf16_random(rng, n, std, buf)
            buf.tofile(f)
            del buf
    return off


def config_json(sh, shape_name, layers, vocab, tok_dir):
    tc = {}
    for f in ("config.json", "tokenizer_config.json"):
        p = os.path.join(tok_dir, f)
        if os.path.exists(p):
            tc.update({k: v for k, v in json.load(open(p)).items() if k in ("bos_token_id", "eos_token_id")})
    cfg = {
        "architectures": [sh["arch"]], "model_type": sh["model_type"],
        "hidden_size": sh["hidden"], "intermediate_size": sh["inter"], "num_hidden_layers": layers,
        "num_attention_heads": sh["heads"], "num_key_value_heads": sh["kv_heads"], "head_dim": sh["head_dim"],
        "vocab_size": vocab, "max_position_embeddings": sh["max_pos"], "rms_norm_eps": sh["eps"],
        "rope_theta": sh["rope_theta"], "hidden_act": "silu", "tie_word_embeddings": sh["tied"],
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16", "use_cache": True,
        "_quanttool_test_checkpoint": f"{shape_name}, random weights (scripts/make_test_checkpoint.py)",
    }
    if sh.get("moe"):
        m = sh["moe"]
        cfg.update({"num_experts": m["experts"], "num_experts_per_tok": m["per_tok"],
                    "moe_intermediate_size": m["inter"], "norm_topk_prob": m["norm_topk_prob"],
                    "decoder_sparse_step": 1, "mlp_only_layers": []})
    cfg.update(tc)
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--tokenizer-from", required=True, help="Hugging Face folder with tokenizer.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, help="override the number of layers (a 70B-wide model that fits the disk)")
    ap.add_argument("--max-shard-size", default="5GB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    ap.add_argument("--workers", type=int, default=1, help="shards written at once (processes)")
    ap.add_argument("--also-layers", type=int, help="also OUT-M: the first M layers, hard links to OUT's shards")
    a = ap.parse_args()

    sh = SHAPES[a.shape]
    layers = a.layers if a.layers is not None else sh["layers"]
    if layers <= 0:
        sys.exit("error: --layers must be positive")
    if not os.path.exists(os.path.join(a.tokenizer_from, "tokenizer.json")):
        sys.exit(f"error: {a.tokenizer_from}: no tokenizer.json")
    if os.path.exists(a.out) and not a.force:
        sys.exit(f"error: {a.out} exists (--force replaces it)")
    vocab = vocab_size(a.tokenizer_from)
    sh = dict(sh, layers=layers)
    items = tensors(sh, vocab)
    if a.also_layers is not None and not 0 < a.also_layers < layers:
        sys.exit(f"error: --also-layers must be between 1 and {layers - 1}")
    cut = shard_groups if a.also_layers else shard
    shards = cut(items, parse_size(a.max_shard_size))
    total = sum(2 * int(np.prod(s)) for _, s in items)
    params = total // 2
    print(f"{a.shape}: {layers} layers, vocab {vocab}, {params / 1e9:.2f} B parameters, "
          f"{total / 1e9:.2f} GB bf16 in {len(shards)} shard(s)", file=sys.stderr)

    # Built beside --out and renamed into place: --out is absent or complete.
    tmp = a.out.rstrip("/") + ".tmp-%d" % os.getpid()
    os.makedirs(tmp)
    try:
        weight_map = {}
        t0 = time.time()
        fnames = ["model.safetensors" if len(shards) == 1 else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                  for i in range(len(shards))]
        if a.workers > 1:
            import multiprocessing
            jobs = [(os.path.join(tmp, fn), it, [a.seed, i], a.std) for i, (fn, it) in enumerate(zip(fnames, shards))]
            with multiprocessing.Pool(a.workers) as pool:
                for path in pool.imap_unordered(write_one, jobs):
                    print(f"  {os.path.basename(path)} ({time.time() - t0:.0f} s)", file=sys.stderr)
        else:
            rng = np.random.default_rng(a.seed)
            for fn, items_i in zip(fnames, shards):
                write_shard(os.path.join(tmp, fn), items_i, rng, a.std)
                print(f"  {fn} ({time.time() - t0:.0f} s)", file=sys.stderr)
        for fn, items_i in zip(fnames, shards):
            for name, _ in items_i:
                weight_map[name] = fn
        finish(tmp, a.out, a, sh, layers, vocab, total, weight_map, len(shards) > 1)
        if a.also_layers:  # the first M layers: the per-layer shards hard-linked
            m = a.also_layers
            sub = a.out.rstrip("/") + f"-{m}"
            stmp = sub + ".tmp-%d" % os.getpid()
            os.makedirs(stmp)
            keep = [(fn, it) for fn, it in zip(fnames, shards) if shard_layer(it) < m or shard_layer(it) >= layers]
            for fn, _ in keep:
                os.link(os.path.join(a.out, fn), os.path.join(stmp, fn))
            sub_map = {name: fn for fn, it in keep for name, _ in it}
            sub_total = sum(2 * int(np.prod(s)) for _, it in keep for _, s in it)
            finish(stmp, sub, a, dict(sh, layers=m), m, vocab, sub_total, sub_map, True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def finish(tmp, out, a, sh, layers, vocab, total, weight_map, indexed):
    """The index, config.json and tokenizer files into tmp, then tmp renamed to out."""
    if indexed:
        with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config_json(sh, a.shape, layers, vocab, a.tokenizer_from), f, indent=2)
    for fn in TOKENIZER_FILES:
        p = os.path.join(a.tokenizer_from, fn)
        if os.path.exists(p):
            shutil.copy(p, tmp)
    if a.force and os.path.exists(out):
        shutil.rmtree(out)
    os.rename(tmp, out)  # fails if another writer got there first: nothing is replaced
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
