#!/usr/bin/env python3
"""The table at the end of scripts/demo.sh, from what it left in its work folder (build/demo):
rows.tsv (label, method, the steps that prepared the row, convert flags), rows/LABEL.json
(`eval-ppl --json`) and steps.tsv (each step's seconds). Prints Markdown: the rows, then the steps
with their times and the total.

  python3 scripts/demo_table.py --work build/demo [--total-since EPOCH] [--subst PATH=NAME ...]
"""
import argparse
import json
import os
import platform
import time


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def baseline_row(results):
    """The unquantized row from the KL run that ran the baseline's forward (not read from a kept
    cache): its PPL and its own forward-and-head time."""
    for j in results:
        if j.get("kl_base_cache") == "written":
            return {"ppl": j["kld"]["ppl_base"], "ppl_err": j["kld"]["ppl_base_err"], "bits_per_weight": 32.0,
                    "kv_compression_vs_f16": 0.5, "tokens_per_second": j["tokens_evaluated"] / j["kl_base_eval_seconds"],
                    "threads": j.get("threads"), "kernel_level": j.get("kernel_level")}
    raise SystemExit("error: no KL run ran the baseline (kl_base_cache 'written')")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--total-since", type=float, help="the demo's start (seconds since the epoch)")
    ap.add_argument("--subst", action="append", default=[], help="PATH=NAME: print PATH in flags as NAME")
    ap.add_argument("--note", default="", help="a line printed under the table")
    a = ap.parse_args()

    steps = []
    for line in open(os.path.join(a.work, "steps.tsv")):
        name, wall, cpu = line.rstrip("\n").split("\t")
        steps.append((name, float(wall), float(cpu)))
    secs_of = {name: wall for name, wall, _ in steps}
    subst = [s.split("=", 1) for s in a.subst]

    print("| row | method | PPL | KLD | same top % | bits/weight | KV bits/value | tok/s | quantize s | flags |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    machine = ""
    rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(a.work, "rows.tsv"))]
    result = {r[0]: os.path.join(a.work, "rows", r[0] + ".json") for r in rows}
    result = {label: json.load(open(p)) for label, p in result.items() if os.path.exists(p)}
    rows.sort(key=lambda r: r[0] != "unquantized")
    for label, method, prep, flags in rows:
        j = result.get(label) or baseline_row(result.values())
        k = j.get("kld", {})
        kld = f"{k['kld_mean']:.4f}" if k else "—"
        top = f"{100 * k['same_top']:.1f}" if k else "—"
        kv_bits = 16 / j["kv_compression_vs_f16"] if j.get("kv_compression_vs_f16") else 0
        tps = j.get("model_tokens_per_second", j["tokens_per_second"])
        prep_s = sum(secs_of.get(p, 0) for p in prep.split(",") if p)
        prep_txt = f"{prep_s:.0f}" if prep else "—"
        for path, name in subst:
            flags = flags.replace(path, name)
        print(f"| {label} | {method} | {j['ppl']:.3f} ± {j['ppl_err']:.3f} | {kld} | {top} | "
              f"{j['bits_per_weight']:.2f} | {kv_bits:.2f} | {tps:.0f} | {prep_txt} | "
              f"{'`' + flags + '`' if flags else ''} |")
        machine = f"{j.get('threads', '?')} threads, kernel {j.get('kernel_level', '?')}"
    print()
    if a.note:
        print(a.note + ".")
    print(f"Machine: {cpu_name()}, {os.cpu_count()} cores; eval-ppl with {machine}. tok/s: the evaluated model's "
          "own forward and output head (a KL run times its baseline apart). quantize s: the convert, "
          "calibration included, plus the shared act-stats pass where the row used it.")
    print()
    print("| step | wall s | CPU s |")
    print("|---|---|---|")
    for name, wall, cpu in steps:
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")
    cpu = sum(c for _, _, c in steps)
    if a.total_since:
        total = time.time() - a.total_since
        excluded = secs_of.get("set-up (packages)", 0) + secs_of.get("fetch model", 0)
        print(f"| **total** | **{total:.1f}** (without set-up and fetch: {total - excluded:.1f}) | {cpu:.1f} |")


if __name__ == "__main__":
    main()
