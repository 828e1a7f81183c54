#!/usr/bin/env python3
"""The KV-cache tables of results/kv.md (SmolLM2).

  run    evaluates rows with `quanttool eval-ppl --method llama --kv-mode decode` on wiki.test.raw,
         the same model with an fp16 cache as the KL baseline (run alongside), one --json per row
         in --out (rows already there are skipped). --jobs runs rows side by side.
  speed  tokens/s of every row in `cache` mode, each right after an fp16-cache run (its % is of
         that run), no KL baseline; writes speed.json in --out.
  table  prints the Markdown table from --out (and llama.cpp logs given with --llama-log).

  python3 scripts/kv_table.py run --out /tmp/kv --chunks 64 --jobs 1
  python3 scripts/kv_table.py run --out /tmp/kv --chunks 0 --rows f16,kivi-4 --suffix full
  python3 scripts/kv_table.py speed --out /tmp/kv --chunks 8 [--llama-bin B --llama-model F32.gguf]
  python3 scripts/kv_table.py table --out /tmp/kv --llama-log q8_0=llama-kv-q8_0.log
  python3 scripts/kv_table.py run --out results/kv-18a --chunks 16 --kv-stats --rows f16,affine-4-rotqr
  python3 scripts/kv_table.py stats --out results/kv-18a
  plot   KLD (log) against bytes per token of every --chunks row in the --out folders, as a PNG:
  python3 scripts/kv_table.py plot --out results/kv,results/kv-18a-64 --png results/kv/kld_vs_bytes.png
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import time

from llama_logs import llama_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# label, eval-ppl KV flags, note
ROWS = [("f16", "--kv f16", "the baseline: fp16 keys and values")]
for b in (2, 3, 4, 8):
    ROWS.append((f"affine-{b}", f"--kv affine:bits={b},group=32", "per token, groups of 32 channels" if b == 4 else ""))
for b in (2, 3, 4):
    ROWS.append((f"kivi-{b}", f"--kv kivi:bits={b}", "keys per channel, values per token, G=32, R=128" if b == 2 else ""))
for b in (1, 2, 2.5, 3, 3.5, 4):
    ROWS.append((f"turboquant_mse-{b}", f"--kv turboquant_mse:bits={b}", "WHT rotation, f_d Lloyd-Max" if b == 4 else ""))
for b in (1, 2, 3, 4):
    ROWS.append((f"turboquant_prod-{b}", f"--kv turboquant_prod:bits={b}", "(b−1)-bit MSE + 1-bit QJL" if b == 3 else ""))
for b in (1, 2, 3, 4):
    ROWS.append((f"qjl-{b}", f"--kv-k qjl:bits={b} --kv-v kivi:bits=2",
                 "keys: m = b·d signs + norm; values KIVI-2 (QJL's reference)" if b == 1 else ""))
for b in (1, 2, 3):
    ROWS.append((f"rvq-{b}", f"--kv rvq:bits={b}", f"{2 * b} bits: two {b}-bit stages" if b == 1 else ""))
for b in (2, 3, 4):
    ROWS.append((f"polar-{b}", f"--kv polar:bits={b}", "paper's configuration (L=4, 4+2 bits)" if b == 4 else ""))
# mixed and windowed configurations: the candidates for the bars (best 4-bit, best 2–3-bit)
ROWS += [
    ("tq4-r128", "--kv turboquant_mse:bits=4 --kv-residual 128", "turboquant_mse-4 with KIVI's R=128 fp16 window"),
    ("kivi3-r32", "--kv kivi:bits=3 --kv-residual 32", "KIVI-3, G=32, R=32"),
    ("kivi3g64-r64", "--kv kivi:bits=3,group=64 --kv-residual 64", "KIVI-3, G=64, R=64"),
    ("k4g64-vtq3", "--kv-k kivi:bits=4,group=64 --kv-v turboquant_mse:bits=3",
     "keys KIVI-4 (G=64, R=128), values turboquant_mse-3"),
    # key centering (eval-ppl --kv-key-center, means from calibrate --method key-mean on wiki.valid)
    ("turboquant_mse-4-kc", "--kv turboquant_mse:bits=4 --kv-key-center {key_means}",
     "turboquant_mse-4, keys centered by their wiki.valid means (r=0)"),
    ("turboquant_mse-3-kc", "--kv turboquant_mse:bits=3 --kv-key-center {key_means}", ""),
    ("affine-4-kc", "--kv affine:bits=4,group=32 --kv-key-center {key_means}", ""),
    # turboquant-mlx's V2 (docs/spec/kv-methods.md §TurboQuant), fractional turboquant_mse, RaBitQ
    ("affine-4-rotqr", "--kv affine:bits=4,group=32,rot=qr", "turboquant-mlx's V2 \"rotated\": QR rotation + affine groups of 32 (r=0)"),
    ("affine-4-rotwht", "--kv affine:bits=4,group=32,rot=wht", "the same with the randomized Hadamard rotation"),
    ("affine-4-rotqr-g64", "--kv affine:bits=4,group=64,rot=qr", "turboquant-mlx's own group size, 64 (one group per head)"),
    ("affine-4-rotqr-kc", "--kv affine:bits=4,group=32,rot=qr --kv-key-center {key_means}",
     "rotated 4-bit with the keys centered by their wiki.valid means"),
    ("affine-3-rotqr", "--kv affine:bits=3,group=32,rot=qr", ""),
    ("affine-3-rotqr-qjl", "--kv affine:bits=3,group=32,rot=qr,qjl=1",
     "turboquant-mlx's V2 \"rot+QJL\": + 1-bit QJL of the residual (d signs + fp16 γ), keys and values"),
    ("affine-3-rotqr-kqjl", "--kv-k affine:bits=3,group=32,rot=qr,qjl=1 --kv-v affine:bits=3,group=32,rot=qr",
     "rot+QJL on the keys only (turboquant-mlx's score correction), values rotated 3-bit"),
    ("turboquant_mse-2.25", "--kv turboquant_mse:bits=2.25", "16 of 64 rotated coordinates at 3 bits, 48 at 2"),
    ("turboquant_mse-2.75", "--kv turboquant_mse:bits=2.75", "48 at 3 bits, 16 at 2"),
    ("turboquant_mse-3.25", "--kv turboquant_mse:bits=3.25", "16 at 4 bits, 48 at 3"),
    ("turboquant_mse-3.75", "--kv turboquant_mse:bits=3.75", "48 at 4 bits, 16 at 3"),
    ("rabitq1-vtq4", "--kv-k rabitq:bits=1 --kv-v turboquant_mse:bits=4",
     "VeloxQuant-MLX's pairing: RaBitQ 1-bit keys (signs + fp16 norm and ⟨ō,o⟩), turboquant_mse-4 values"),
    ("rabitq1-vtq4-kc", "--kv-k rabitq:bits=1 --kv-v turboquant_mse:bits=4 --kv-key-center {key_means}",
     "the same with RaBitQ's centroid c = the keys' per-head wiki.valid mean"),
    ("rabitq2-vtq4", "--kv-k rabitq:bits=2 --kv-v turboquant_mse:bits=4", "extended RaBitQ 2-bit keys"),
    ("rabitq3-vtq4", "--kv-k rabitq:bits=3 --kv-v turboquant_mse:bits=4", "extended RaBitQ 3-bit keys"),
    ("rabitq4-vtq4", "--kv-k rabitq:bits=4 --kv-v turboquant_mse:bits=4", "extended RaBitQ 4-bit keys"),
    # calibrated methods: tables from calibrate --method kv-codebook, passed with --artifacts
    ("vecinfer2-ktq4", "--kv-k vecinfer:bits=2 --kv-v turboquant_mse:bits=4",
     "keys VecInfer-2 (calibrated PQ, 4-dim sub-vectors, 256 centroids), values turboquant_mse-4"),
    ("vecinfer1-ktq4", "--kv-k vecinfer:bits=1 --kv-v turboquant_mse:bits=4", "keys VecInfer-1 (8-dim sub-vectors)"),
    ("kivi2-ktq4", "--kv-k kivi:bits=2 --kv-v turboquant_mse:bits=4 --kv-residual 0",
     "keys KIVI-2 (G=32, r=0), values turboquant_mse-4"),
    ("kivi2-ktq4-r128", "--kv-k kivi:bits=2 --kv-v turboquant_mse:bits=4", "keys KIVI-2 with its R=128 window"),
    # CommVQ: residual VQ of the pre-RoPE keys, RoPE-commuting codeword pairs
    ("commvq2-ktq4", "--kv-k commvq:bits=2 --kv-v turboquant_mse:bits=4",
     "keys CommVQ-2 (16 stages of 256 codewords, pre-RoPE, RoPE at score time), values turboquant_mse-4"),
    ("commvq3-ktq4", "--kv-k commvq:bits=3 --kv-v turboquant_mse:bits=4",
     "keys CommVQ-3 (24 stages: KIVI-2 keys' bytes), values turboquant_mse-4"),
    ("commvq2c4-ktq4", "--kv-k commvq:bits=2,cb=4 --kv-v turboquant_mse:bits=4",
     "keys CommVQ-2 with 4-bit codebooks (32 stages of 16 codewords: an 8x cheaper encoder)"),
    ("commvq2c4free-ktq4", "--kv-k commvq:bits=2,cb=4,comm=0 --kv-v turboquant_mse:bits=4",
     "CommVQ-2 cb=4 keys without the RoPE-commuting projection (ablation)"),
    ("commvq2free-ktq4", "--kv-k commvq:bits=2,comm=0 --kv-v turboquant_mse:bits=4",
     "CommVQ-2 keys without the RoPE-commuting projection (ablation)"),
    ("commvq0.25-ktq4", "--kv-k commvq:bits=0.25 --kv-v turboquant_mse:bits=4",
     "VeloxQuant-MLX's 64x keys at d = 64: 2 stages of 256 codewords (16 bits per key)"),
    ("spectral-3", "--kv spectral:bits=3", "calibrated PCA rotation, greedy bits, empirical Lloyd-Max"),
    ("spectral3-ktq3", "--kv-k spectral:bits=3 --kv-v turboquant_mse:bits=3", "keys SpectralQuant-3, values turboquant_mse-3"),
]

# llama.cpp's cache types: bytes per block of 32 values (ggml-common.h: f16 scale + codes)
LLAMA_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}


def row_flags(label, extra):
    for l, f, _ in ROWS:
        if l == label:
            return f
    if label in extra:
        return extra[label]
    sys.exit(f"unknown row {label}")


def key_means(a):
    """The key-mean file the *-kc rows center with: --key-means, or made here on the calibration text."""
    path = a.key_means or os.path.join(a.out, "key_means.safetensors")
    if not os.path.exists(path):
        valid = os.path.join(os.path.dirname(a.text), "wiki.valid.tokens.txt")
        subprocess.run(shlex.split(a.bin) + ["calibrate", "--method", "key-mean", "--model", a.model, "--text", valid,
                                             "--chunks", "8", "--out", path] +
                       (["--threads", str(a.threads)] if a.threads > 0 else []), check=True)
    return path


def expand(a, flags):
    return flags.replace("{key_means}", key_means(a)) if "{key_means}" in flags else flags


def eval_row(a, label, flags, suffix):
    path = os.path.join(a.out, f"{label}{suffix}.json")
    if os.path.exists(path):
        return path
    flags = expand(a, flags)
    cmd = shlex.split(a.bin) + ["eval-ppl", "--model", a.model, "--text", a.text, "--kv-mode", "decode",
                                "--kl-base-model", a.model, "--kl-base-kv", "f16", "--json", path + ".tmp"]
    cmd += shlex.split(flags)
    if a.chunks > 0:
        cmd += ["--chunks", str(a.chunks)]
    if a.threads > 0:
        cmd += ["--threads", str(a.threads)]
    if a.artifacts:
        cmd += ["--artifacts", a.artifacts]
    if a.kv_stats and label != "f16":  # a full-precision cache has nothing to compare
        cmd += ["--kv-stats"]
    t = time.time()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(f"FAILED {label}: {r.stdout[-2000:]}", file=sys.stderr)
        return None
    os.replace(path + ".tmp", path)
    print(f"{label}{suffix}: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    return path


def parse_extra(items):
    extra = {}
    for it in items or []:
        k, v = it.split("=", 1)
        extra[k] = v
    return extra


def cmd_run(a):
    os.makedirs(a.out, exist_ok=True)
    extra = parse_extra(a.extra)
    labels = a.rows.split(",") if a.rows else [r[0] for r in ROWS] + list(extra)
    if any("{key_means}" in row_flags(l, extra) for l in labels):
        key_means(a)  # once, before the rows that need it run in parallel
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        list(ex.map(lambda l: eval_row(a, l, row_flags(l, extra), a.suffix), labels))


def cmd_speed(a):
    extra = parse_extra(a.extra)
    labels = a.rows.split(",") if a.rows else [r[0] for r in ROWS if r[0] != "f16"] + list(extra)
    out = {}
    def wall_tps(cmd):  # tokens evaluated over the whole process's wall time, the same for both tools
        t = time.monotonic()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return a.chunks * 512 / (time.monotonic() - t)
    def tps(flags):
        cmd = shlex.split(a.bin) + ["eval-ppl", "--model", a.model, "--text", a.text, "--chunks", str(a.chunks),
                                    "--kv-mode", "cache"] + shlex.split(expand(a, flags))
        if a.threads > 0:
            cmd += ["--threads", str(a.threads)]
        return wall_tps(cmd)
    # Each row right after its own fp16 run: the ratio of that pair (the shared machine's speed
    # drifts by ±10% over a sweep, more than the differences between rows).
    base, pct = [], {}
    for l in labels:
        base.append(tps("--kv f16"))
        out[l] = tps(row_flags(l, extra))
        pct[l] = 100 * out[l] / base[-1]
        print(f"{l}: {out[l]:.0f} tok/s ({pct[l]:.0f}% of the fp16 run before it, {base[-1]:.0f})",
              file=sys.stderr, flush=True)
    if a.llama_bin:  # llama.cpp's caches in the same sweep, its own f16 cache as their reference
        for name in ("f16", "q8_0", "q4_0"):
            cmd = [a.llama_bin, "-m", a.llama_model, "-f", a.text, "-c", "512", "--chunks", str(a.chunks),
                   "-fa", "on", "-ctk", name, "-ctv", name] + (["-t", str(a.threads)] if a.threads > 0 else [])
            out[f"llama.cpp {name}"] = wall_tps(cmd)
            print(f"llama.cpp {name}: {out[f'llama.cpp {name}']:.0f} tok/s", file=sys.stderr, flush=True)
    path = os.path.join(a.out, "speed.json")
    if a.rows and os.path.exists(path):  # some rows again: keep the others' figures and fp16 runs
        old = json.load(open(path))
        base = old.get("_f16_runs", []) + base
        pct = {**old.get("_pct_of_paired_f16", {}), **pct}
        out = {**{k: v for k, v in old.items() if not k.startswith("_")}, **out}
    out["f16"] = sum(base) / len(base)
    out["_f16_runs"] = base
    out["_pct_of_paired_f16"] = pct
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=2)
    os.replace(path + ".tmp", path)


def cmd_table(a):
    extra = parse_extra(a.extra)
    notes = {l: n for l, _, n in ROWS}
    speed = {}
    if os.path.exists(os.path.join(a.out, "speed.json")):
        speed = json.load(open(os.path.join(a.out, "speed.json")))
    def load(label, suffix=""):
        p = os.path.join(a.out, f"{label}{suffix}.json")
        return json.load(open(p)) if os.path.exists(p) else None
    labels = [r[0] for r in ROWS] + list(extra)
    # The fp16-cache baseline of the full text: its own file, or the KL baseline that every full-text
    # row ran alongside (--kl-base-kv f16: the same model with an fp16 cache, the same positions).
    base = {"": load("f16"), "_full": load("f16", "_full")}
    if not base["_full"]:
        for label in labels:
            j = load(label, "_full")
            if j and j.get("kl_base_kv") == "f16":
                k = j["kld"]
                base["_full"] = {"ppl": k["ppl_base"], "ppl_err": k["ppl_base_err"], "chunks": j["chunks"],
                                 "kv_bytes_per_token": j["kv_bytes_per_token"] * j["kv_compression_vs_f16"],
                                 "kv_compression_vs_f16": 1.0, "kld": {"kld_mean": 0.0, "same_top": 1.0}}
                break
    f16_bytes = base[""]["kv_bytes_per_token"] if base[""] else None
    print("| cache | text | PPL | ΔPPL vs fp16 | KLD | same top % | KV bytes/token | vs fp16 | tok/s (cache mode) | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label in labels:
        for suffix in ("_full", ""):
            j = base[suffix] if label == "f16" else load(label, suffix)
            b = base[suffix]
            if not j:
                continue
            text = "full" if suffix else f"{j['chunks']} chunks"
            k = j.get("kld", {})
            d = j["ppl"] - b["ppl"] if b else float("nan")
            rel = 100 * d / b["ppl"] if b else float("nan")
            sp = speed.get(label)
            pc = speed.get("_pct_of_paired_f16", {}).get(label, 100 * sp / speed["f16"] if sp and "f16" in speed else None)
            tp = f"{sp:.0f} ({pc:.0f}%)" if sp and pc else "—"
            if label == "f16" and "f16" in speed:
                tp = f"{speed['f16']:.0f}"
            note = notes.get(label, "")
            if label == "f16" and suffix and not load("f16", "_full"):
                note = "the KL baseline the full-text rows ran alongside"
            print(f"| {label} | {text} | {j['ppl']:.4f} ± {j['ppl_err']:.4f} | {d:+.4f} ({rel:+.2f}%) | "
                  f"{k.get('kld_mean', float('nan')):.6f} | {100 * k.get('same_top', float('nan')):.2f} | "
                  f"{j['kv_bytes_per_token']:.0f} | {j['kv_compression_vs_f16']:.2f}× | {tp} | {note} |")
    for item in a.llama_log or []:
        name, path = item.split("=", 1)
        r = llama_log(path)
        nbytes = f16_bytes / 2 / 32 * LLAMA_BLOCK_BYTES[name] if f16_bytes and name in LLAMA_BLOCK_BYTES else None
        by = f"{nbytes:.0f} | {f16_bytes / nbytes:.2f}×" if nbytes else "— | —"
        sp = speed.get(f"llama.cpp {name}")
        tp = f"{sp:.0f} ({100 * sp / speed['llama.cpp f16']:.0f}% of its f16)" if sp and "llama.cpp f16" in speed else "—"
        ppl = r["ppl"] or r["final"]
        d = f"{ppl - r['ppl_base']:+.4f} ({100 * (ppl - r['ppl_base']) / r['ppl_base']:+.2f}%)" if r["ppl_base"] else "—"
        print(f"| llama.cpp {name} | 64 chunks | {ppl:.4f} | {d} | {r['kld']:.6f} | "
              f"{r['same_top']:.2f} | {by} | {tp} | llama-perplexity -ctk {name} -ctv {name} -fa on, KLD vs its f16 cache |")


def cmd_stats(a):
    """The --kv-stats columns (all layers) of the rows run with --kv-stats."""
    extra = parse_extra(a.extra)
    print("| cache | text | K cos | K rel MSE | V cos | V rel MSE | score rel err | attn TV |")
    print("|---|---|---|---|---|---|---|---|")
    for label in [r[0] for r in ROWS] + list(extra):
        p = os.path.join(a.out, f"{label}{a.suffix}.json")
        if not os.path.exists(p):
            continue
        j = json.load(open(p))
        st = j.get("kv_stats", {}).get("all")
        if not st:
            continue
        f = lambda k: f"{st[k]:.4f}" if k in st else "—"
        print(f"| {label} | {j['chunks']} chunks | {f('k_cos')} | {f('k_rel_mse')} | {f('v_cos')} | {f('v_rel_mse')} | "
              f"{f('score_rel_err')} | {f('attn_tv')} |")


def family(label):
    """The method a row belongs to, for the plot's markers: the label up to its first digit or '-'."""
    import re
    m = re.match(r"[a-z_]+", label)
    f = m.group(0) if m else label
    return {"tq": "turboquant_mse", "k": "affine K + turboquant V"}.get(f, f)


def cmd_plot(a):
    """KLD (log) against KV bytes per token for every 64-chunk row of the --out folders (several
    may be given as OUT1,OUT2: rows of a later folder replace same-named ones), one marker per method
    family, the Pareto frontier drawn through the best rows. Needs matplotlib."""
    import glob
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = {}
    for d in a.out.split(","):
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            label = os.path.basename(path)[:-5]
            try:
                j = json.load(open(path))
            except (ValueError, OSError):
                continue
            k = j.get("kld")
            if not isinstance(k, dict) or j.get("chunks") != a.chunks or label == "f16":
                continue
            rows[label] = (j["kv_bytes_per_token"], k["kld_mean"])
    if not rows:
        sys.exit(f"plot: no {a.chunks}-chunk rows with a KLD in {a.out}")
    fig, ax = plt.subplots(figsize=(9, 6))
    fams = sorted({family(l) for l in rows})
    markers = "osD^v<>pP*XhH8d"
    for i, f in enumerate(fams):
        pts = [(l, b, k) for l, (b, k) in rows.items() if family(l) == f]
        ax.scatter([b for _, b, _ in pts], [max(k, 1e-5) for _, _, k in pts], marker=markers[i % len(markers)], s=45, label=f)
        for l, b, k in pts:
            ax.annotate(l, (b, max(k, 1e-5)), fontsize=6.5, xytext=(4, 3), textcoords="offset points")
    front, best = [], float("inf")
    for l, (b, k) in sorted(rows.items(), key=lambda r: r[1][0]):
        if k < best:
            front.append((b, max(k, 1e-5)))
            best = k
    ax.step([b for b, _ in front], [k for _, k in front], where="post", color="k", alpha=0.35, lw=1, label="frontier")
    ax.axvline(23040, color="grey", ls=":", lw=1)
    ax.annotate("f16 cache: 23040 B/token", (23040, ax.get_ylim()[1]), fontsize=7, ha="right", va="top", rotation=90)
    ax.set_yscale("log")
    ax.set_xlabel("KV cache bytes per token (all layers, keys + values)")
    ax.set_ylabel(f"KLD vs the fp16 cache ({a.chunks} chunks of 512, wiki.test.raw)")
    ax.set_title("SmolLM2-135M-Instruct: KV-cache quantization, KLD against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"{len(rows)} rows -> {a.png}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["run", "speed", "table", "stats", "plot"])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "quanttool"))
    p.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--text", default=os.path.join(ROOT, "data", "wikitext-2", "wiki.test.raw"))
    p.add_argument("--out", required=True)
    p.add_argument("--chunks", type=int, default=64, help="0: the whole text")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--rows", help="comma-separated labels (default: all)")
    p.add_argument("--suffix", default="", help="file suffix for these results (e.g. _full)")
    p.add_argument("--extra", action="append", help="LABEL=FLAGS: a row not in the built-in list")
    p.add_argument("--artifacts")
    p.add_argument("--kv-stats", action="store_true", help="run: also eval-ppl --kv-stats (its 'all' row goes in the stats table)")
    p.add_argument("--key-means", help="key-mean file of the *-kc rows (default: OUT/key_means.safetensors, made on wiki.valid)")
    p.add_argument("--llama-log", action="append", help="NAME=PATH of a llama-perplexity --kl-divergence log")
    p.add_argument("--llama-bin", help="llama-perplexity: speed also measures its f16, q8_0 and q4_0 caches")
    p.add_argument("--llama-model", help="the GGUF llama-perplexity runs (the same weights, F32)")
    p.add_argument("--png", default=os.path.join(ROOT, "results", "kv", "kld_vs_bytes.png"), help="plot: the PNG to write")
    a = p.parse_args()
    {"run": cmd_run, "speed": cmd_speed, "table": cmd_table, "stats": cmd_stats, "plot": cmd_plot}[a.what](a)


if __name__ == "__main__":
    main()
