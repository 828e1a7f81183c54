#!/usr/bin/env python3
"""Write the device job list: one line per job, 'NAME<TAB>shell command'. Run on the device in /tmp/kit."""
import sys
Q = "./quanttool"
M = "model.gguf"
T = "wiki.test.raw"
jobs = []
PARTS = [(o, 37) for o in range(0, 592, 37)]

def add(prefix, name, base, parts):
    """One 64-chunk job, or the full text as 16 parts of 37 chunks (merged later with eval-ppl --merge)."""
    tag = f"{prefix}_{name}"
    if parts:
        for o, n in PARTS:
            jobs.append((f"{tag}.p{o}", f"{base} --chunks {n} --chunk-offset {o} --token-stats --json res/{tag}.p{o}.json"))
    else:
        jobs.append((tag, f"{base} --chunks 64 --json res/{tag}.json"))

def kv(name, flags, parts):
    add("kv5", name, f"{Q} eval-ppl --model {M} --text {T} --kv-mode decode --kl-base-model {M} --kl-base-kv f16 --threads 1 {flags}", parts)

def w(name, flags, parts):
    model = f"conv/{name}" if flags else M
    add("w4", name, f"{Q} eval-ppl --model {model} --text {T} --kl-base-model {M} --threads 1", parts)

FULL_KV = {"kivi-4": "--kv kivi:bits=4", "kivi3-r32": "--kv kivi:bits=3 --kv-residual 32",
           "k4g64-vtq3": "--kv-k kivi:bits=4,group=64 --kv-v turboquant_mse:bits=3",
           "tq4-r128": "--kv turboquant_mse:bits=4 --kv-residual 128"}
FULL_W = {"w8a8": "--scheme int8 --group-size 0", "affine4-g64": "--scheme affine --bits 4 --group-size 64",
          "nf4": "--scheme nf4 --group-size 64 --format native"}
W64 = {"w8a8-g128": "--scheme int8 --group-size 128", "w4a8": "--scheme int4 --group-size 0",
       "w4a8-g128": "--scheme int4 --group-size 128", "affine8-g64": "--scheme affine --bits 8 --group-size 64",
       "affine6-g64": "--scheme affine --bits 6 --group-size 64", "affine5-g64": "--scheme affine --bits 5 --group-size 64",
       "affine4-g32": "--scheme affine --bits 4 --group-size 32", "affine4-g128": "--scheme affine --bits 4 --group-size 128",
       "affine3-g64": "--scheme affine --bits 3 --group-size 64", "affine2-g64": "--scheme affine --bits 2 --group-size 64",
       "fp4": "--scheme fp4 --group-size 64 --format native"}
KV64 = {"f16": "--kv f16"}
for b in (2, 3, 4, 8): KV64[f"affine-{b}"] = f"--kv affine:bits={b},group=32"
for b in (2, 3, 4): KV64[f"kivi-{b}"] = f"--kv kivi:bits={b}"
for b in (1, 2, 2.5, 3, 3.5, 4): KV64[f"turboquant_mse-{b}"] = f"--kv turboquant_mse:bits={b}"
for b in (1, 2, 3, 4): KV64[f"turboquant_prod-{b}"] = f"--kv turboquant_prod:bits={b}"
for b in (1, 2, 3, 4): KV64[f"qjl-{b}"] = f"--kv-k qjl:bits={b} --kv-v kivi:bits=2"
for b in (1, 2, 3): KV64[f"rvq-{b}"] = f"--kv rvq:bits={b}"
for b in (2, 3, 4): KV64[f"polar-{b}"] = f"--kv polar:bits={b}"
for k in ("kivi3-r32", "k4g64-vtq3", "tq4-r128"): KV64[k] = FULL_KV[k]
KV64["kivi3g64-r64"] = "--kv kivi:bits=3,group=64 --kv-residual 64"

# longest first: full-text parts, then 64-chunk rows
DONE = set(open("done64.txt").read().split())
for n, f in KV64.items():
    if f"kv5_{n}" not in DONE: kv(n, f, False)
w("unquantized", None, False)
for n, f in W64.items():
    if f"w4_{n}" not in DONE: w(n, f, False)
for n, f in FULL_KV.items(): kv(n, f, True)
for n, f in FULL_W.items(): w(n, f, True)
with open("jobs.txt", "w") as fo:
    for n, c in jobs:
        fo.write(f"{n}\t{c}\n")
with open("convert.sh", "w") as fo:
    fo.write("set -e\nmkdir -p conv\n")
    for n, f in {**FULL_W, **W64}.items():
        fo.write(f"[ -d conv/{n} ] || {Q} convert --in {M} --out conv/{n} {f} > conv/{n}.log 2>&1 &\n")
    fo.write("wait\n")
print(len(jobs), "jobs")
