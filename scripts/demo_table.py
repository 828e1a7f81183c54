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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--total-since", type=float, help="the demo's start (seconds since the epoch)")
    ap.add_argument("--subst", action="append", default=[], help="PATH=NAME: print PATH in flags as NAME")
    ap.add_argument("--note", default="", help="a line printed under the table")
    a = ap.parse_args()

    steps = []
    for line in open(os.path.join(a.work, "steps.tsv")):
        name, secs = line.rstrip("\n").split("\t")
        steps.append((name, float(secs)))
    secs_of = dict(steps)
    subst = [s.split("=", 1) for s in a.subst]

    print("| row | method | PPL | KLD | same top % | bits/weight | KV bits/value | tok/s | quantize s | flags |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    machine = ""
    for line in open(os.path.join(a.work, "rows.tsv")):
        label, method, prep, flags = line.rstrip("\n").split("\t")
        j = json.load(open(os.path.join(a.work, "rows", label + ".json")))
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
    print("| step | seconds |")
    print("|---|---|")
    for name, s in steps:
        print(f"| {name} | {s:.1f} |")
    if a.total_since:
        total = time.time() - a.total_since
        excluded = secs_of.get("set-up (packages)", 0) + secs_of.get("fetch model", 0)
        print(f"| **total** | **{total:.1f}** (without set-up and fetch: {total - excluded:.1f}) |")


if __name__ == "__main__":
    main()
