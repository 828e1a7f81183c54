#!/usr/bin/env python3
"""Medians of whole-process A/B pairs from a log of `run` lines (scripts/device_engine.sh cpuab):
per configuration, the median whole time of each binary and the median of the per-pair ratios.
Usage: scripts/ab_median.py LOG"""
import re
import statistics as st
import sys

rows = {}
for line in open(sys.argv[1]):
    m = re.search(r"whole ([\d.]+) s: taskset -c [\d,]+ (cpu_base|cpu_new) eval-ppl .*?(--model \S+(?: --kv \S+)?)", line)
    if m:
        rows.setdefault(m.group(3), {}).setdefault(m.group(2), []).append(float(m.group(1)))
for k, v in rows.items():
    b, n = v["cpu_base"], v["cpu_new"]
    pr = [y / x for x, y in zip(b, n)]
    print(f"{k:40s} pairs {len(pr)}  median whole base {st.median(b):.2f} s  new {st.median(n):.2f} s  "
          f"new/base: median of pair ratios {st.median(pr):.3f}, ratio of medians {st.median(n) / st.median(b):.3f}")
