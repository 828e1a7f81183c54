#!/usr/bin/env python3
"""The weight-quantization quality table of results/weights.md (SmolLM2).

For every row: `quanttool convert` the source model with the row's flags, then
`quanttool eval-ppl --method llama --ctx 512` on wiki.test.raw with the unquantized model as the
KL baseline (run alongside in the same process; tok/s is the evaluated model's own forward), and read the --json results. llama.cpp rows are
read from llama-perplexity --kl-divergence logs given with --llama-log (llama.cpp is not part of
this repository; results/weights.md gives the commands, scripts/llama_reference.sh runs them).
Results are cached per row in --work, so a rerun only evaluates what is missing. Prints a Markdown
table on stdout.

  python3 scripts/quality_table.py --work /tmp/qt-quality --chunks 64 \
      --full unquantized,w8a8,affine4-g64,nf4 --llama-log Q4_0=/path/llama-kld64-Q4_0.log

Full-text rows can come from parts run elsewhere and merged (`eval-ppl --merge ... --json
WORK/LABEL.full.json`); the unquantized full row is then the KL baseline those rows ran alongside.
--speed N measures tokens/s of every row here, one after the other in one sweep (the unquantized
model first and last, llama.cpp GGUFs given with --llama-gguf in the same sweep), N chunks, no KL
baseline, and keeps them in WORK/speed.json; the table's tok/s column is read from there.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from llama_logs import llama_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# label, convert flags (None: the source model itself), note
ROWS = [
    ("unquantized", None, "the Q4_1 source dequantized to fp32: the baseline"),
    ("w8a8", "--scheme int8 --group-size 0", "int8 per-channel weights, int8 per-token activations"),
    ("w8a8-g128", "--scheme int8 --group-size 128", ""),
    ("w4a8", "--scheme int4 --group-size 0", "int4 per-channel weights, int8 activations"),
    ("w4a8-g128", "--scheme int4 --group-size 128", ""),
    ("affine8-g64", "--scheme affine --bits 8 --group-size 64", ""),
    ("affine6-g64", "--scheme affine --bits 6 --group-size 64", ""),
    ("affine5-g64", "--scheme affine --bits 5 --group-size 64", ""),
    ("affine4-g32", "--scheme affine --bits 4 --group-size 32",
     "the source's group (Q4_1 is 4-bit affine, group 32), yet not its grid: MLX makes the edge value "
     "exact (scale = edge / round(edge / scale)), which moves the levels off Q4_1's"),
    ("affine4-g64", "--scheme affine --bits 4 --group-size 64", ""),
    ("affine4-g128", "--scheme affine --bits 4 --group-size 128", ""),
    ("affine3-g64", "--scheme affine --bits 3 --group-size 64", ""),
    ("affine2-g64", "--scheme affine --bits 2 --group-size 64", ""),
    ("nf4", "--scheme nf4 --group-size 64 --format native", "bitsandbytes NF4 codes, blocksize 64"),
    ("fp4", "--scheme fp4 --group-size 64 --format native", "bitsandbytes FP4 codes, blocksize 64"),
]


def run(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def kl_baseline_of_full_rows(work, model):
    """The unquantized model's full-text figures, as the KL baseline of a full-text row saw them."""
    for label, flags, _ in ROWS:
        p = os.path.join(work, f"{label}.full.json")
        if flags and os.path.exists(p):
            j = json.load(open(p))
            k = j["kld"]
            return {"ppl": k["ppl_base"], "ppl_err": k["ppl_base_err"], "ppl_base": k["ppl_base"], "kld": 0.0,
                    "same_top": 100.0, "bpw": None, "tps": None, "compute": j.get("compute", "")}
    return None


def tokens_per_second(cmd, chunks):
    """Tokens evaluated over the whole process's wall time (load included), the same for both tools:
    llama-perplexity prints no evaluation-only rate in this version."""
    t = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return chunks * 512 / (time.monotonic() - t)


def speed_sweep(a):
    """Every row's tokens/s, one row after another on this machine, the unquantized model first and last."""
    def ours(model):
        return tokens_per_second([a.bin, "eval-ppl", "--model", model, "--text", a.text, "--chunks", str(a.speed),
                                  "--threads", str(a.threads)], a.speed)
    out = {}
    base = [ours(a.model)]
    for label, flags, _ in ROWS:
        if flags is None:
            continue
        model = os.path.join(a.work, label)
        if not os.path.exists(model):
            run([a.bin, "convert", "--in", a.model, "--out", model] + flags.split())
        out[label] = ours(model)
        print(f"{label}: {out[label]:.0f} tok/s", file=sys.stderr, flush=True)
    for spec in a.llama_gguf:
        label, path = spec.split("=", 1)
        out[f"llama.cpp {label}"] = tokens_per_second(
            [a.llama_bin, "-m", path, "-f", a.text, "-c", "512", "--chunks", str(a.speed), "-t", str(a.threads)], a.speed)
        print(f"llama.cpp {label}: {out[f'llama.cpp {label}']:.0f} tok/s", file=sys.stderr, flush=True)
    base.append(ours(a.model))
    out["unquantized"] = sum(base) / len(base)
    out["_unquantized_runs"] = base
    with open(os.path.join(a.work, "speed.json"), "w") as f:
        json.dump(out, f, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True, help="folder for converted models and results")
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default=os.path.join(ROOT, "data/wikitext-2/wiki.test.raw"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/quanttool"))
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--full", default="", help="comma-separated labels evaluated on the full text")
    ap.add_argument("--only", default="", help="comma-separated labels to (re)run; default all")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-log", action="append", default=[], help="LABEL=PATH of a llama-perplexity KLD log")
    ap.add_argument("--llama-bpw", action="append", default=[], help="LABEL=BITS per weight of that GGUF")
    ap.add_argument("--speed", type=int, default=0, help="measure tokens/s over N chunks into WORK/speed.json")
    ap.add_argument("--llama-bin", help="llama-perplexity, for the --speed sweep")
    ap.add_argument("--llama-gguf", action="append", default=[], help="LABEL=PATH of a GGUF for the --speed sweep")
    a = ap.parse_args()
    if a.speed:
        return speed_sweep(a)
    os.makedirs(a.work, exist_ok=True)
    full = set(filter(None, a.full.split(",")))
    only = set(filter(None, a.only.split(",")))

    results = []
    for label, flags, note in ROWS:
        if only and label not in only:
            continue
        chunks = None if label in full else a.chunks
        tag = "full" if chunks is None else f"c{chunks}"
        out_json = os.path.join(a.work, f"{label}.{tag}.json")
        if label == "unquantized" and tag == "full" and not os.path.exists(out_json):
            j = kl_baseline_of_full_rows(a.work, a.model)
            if j:
                results.append((label, note + " (the KL baseline of the full-text rows)", tag, j))
                continue
        if not os.path.exists(out_json):
            model = a.model
            if flags:
                model = os.path.join(a.work, label)
                if not os.path.exists(model):
                    run([a.bin, "convert", "--in", a.model, "--out", model] + flags.split())
            cmd = [a.bin, "eval-ppl", "--model", model, "--text", a.text, "--threads", str(a.threads),
                   "--json", out_json]
            if chunks is not None:
                cmd += ["--chunks", str(chunks)]
            if flags:
                cmd += ["--kl-base-model", a.model]
            run(cmd)
        j = json.load(open(out_json))
        k = j.get("kld", {})
        results.append((label, note, tag, {
            "ppl": j["ppl"], "ppl_err": j["ppl_err"], "ppl_base": k.get("ppl_base", j["ppl"]),
            "kld": k.get("kld_mean", 0.0), "same_top": 100 * k.get("same_top", 1.0),
            "bpw": j["bits_per_weight"], "tps": j.get("model_tokens_per_second", j["tokens_per_second"]), "compute": j.get("compute", ""),
        }))
    speed = {}
    if os.path.exists(os.path.join(a.work, "speed.json")):
        speed = json.load(open(os.path.join(a.work, "speed.json")))
        results = [(l, n, t, {**r, "tps": speed.get(l)}) for l, n, t, r in results]
    bpw = dict(x.split("=", 1) for x in a.llama_bpw)
    for spec in a.llama_log:
        label, path = spec.split("=", 1)
        r = llama_log(path)
        r["bpw"] = float(bpw[label]) if label in bpw else None
        r["tps"] = speed.get(f"llama.cpp {label}")
        results.append((f"llama.cpp {label}", "llama-perplexity --kl-divergence", f"c{a.chunks}", r))

    logged = {f"llama.cpp {spec.split('=', 1)[0]}" for spec in a.llama_log}
    for key, tps in speed.items():  # llama.cpp GGUFs timed in the sweep without a KLD log (F32, BF16)
        if key.startswith("llama.cpp ") and key not in logged:
            results.append((key, "speed only (the unquantized weights)", "speed", {"tps": tps}))

    print("| row | text | PPL | ΔPPL | KLD | same top % | bits/weight | tok/s | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, note, tag, r in results:
        if tag == "speed":
            print(f"| {label} | — | — | — | — | — | — | {r['tps']:.0f} | {note} |")
            continue
        dppl = r["ppl"] - r["ppl_base"] if r.get("ppl_base") else 0.0
        text = "full" if tag == "full" else f"{tag[1:]} chunks"
        bpw_s = f"{r['bpw']:.2f}" if r.get("bpw") else "—"
        tps = f"{r['tps']:.0f}" if r.get("tps") else "—"
        print(f"| {label} | {text} | {r['ppl']:.4f} ± {r['ppl_err']:.4f} | {dppl:+.4f} | {r['kld']:.6f} | "
              f"{r['same_top']:.2f} | {bpw_s} | {tps} | {note} |")


if __name__ == "__main__":
    main()
