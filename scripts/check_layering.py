#!/usr/bin/env python3
"""Fails when a project #include climbs the layer order below, or when source files form a cycle.

Layers, lowest first. A file may include files of its own layer or of any layer below it, never
one above:

  formats          file formats (GGUF, safetensors, checkpoints, tokenizer); no libquant
  libquant         the root helpers: cpu_features.h, parallel.h, team_barrier.h
  libquant/math    the non-GEMM math of the forward pass and the evaluation (RMSNorm, RoPE, attention)
  libquant/kernels GEMM/GEMV microkernels over packed operands
  libquant/schemes weight quantization schemes: quantize, dequantize, reference GEMM
  libquant/linear  Linear and its dense, integer and weight-only families (kernels + schemes)
  libquant/kv      KV caches and their codecs
  libquant/model   the transformer (Linears + KV cache + math)
  libquant/eval    perplexity and KL divergence over a model
  libquant/bench   throughput benchmarks
  libquant/cuda    the CUDA backend
  calib            calibration (GPTQ, rotations, KV codebooks, ...)
  apps             the quanttool commands
  tests, fuzz      free to include anything

Cycles between object files: a source file (x.cpp, x.cu) depends on the source file of every
header it reaches through its includes (y.h -> y.cpp / y.cu beside it), since that is where what
y.h declares is defined. A strongly connected set of more than one source file is reported (a.cpp
calls into b.cpp and b.cpp back into a.cpp: neither can be understood, tested or moved alone).

Private headers: a header whose name says it is private (detail / _impl) may only be included
from its own folder.

Usage: check_layering.py [repo root]   (default: the parent of this script's folder). Exit 1 on a
violation, each one on its own line.
"""
import os
import re
import sys

LAYERS = [
    "formats",
    "libquant",
    "libquant/math",
    "libquant/kernels",
    "libquant/schemes",
    "libquant/linear",
    "libquant/kv",
    "libquant/model",
    "libquant/eval",
    "libquant/bench",
    "libquant/cuda",
    "calib",
    "apps",
    "tests",
    "fuzz",
]
TOP = {"tests", "fuzz"}  # may include anything
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".c", ".cu", ".cuh", ".inc")
OBJECT_EXT = (".cpp", ".cc", ".c", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
PRIVATE = re.compile(r"(^|_)(detail|impl)(_|\.)")


def layer_of(path):
    """The longest declared layer that is a prefix folder of `path`, or None."""
    best = None
    for name in LAYERS:
        if name == "libquant":
            if os.path.dirname(path) == "libquant":
                best = name
        elif path.startswith(name + "/") and (best is None or len(name) > len(best)):
            best = name
    return best


def sources(root):
    for top in sorted({name.split("/")[0] for name in LAYERS}):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    for inc in INCLUDE.findall(text):
        for cand in (inc, os.path.normpath(os.path.join(os.path.dirname(path), inc)).replace(os.sep, "/")):
            if os.path.isfile(os.path.join(root, cand)):
                yield cand
                break


def unit(path):
    return os.path.splitext(path)[0]


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    rank = {name: i for i, name in enumerate(LAYERS)}
    problems = []
    graph = {}
    files = list(sources(root))
    if not files:
        print(f"error: no sources under {root}")
        return 2
    direct = {path: list(includes(root, path)) for path in files}
    for path in files:
        src_layer = layer_of(path)
        if src_layer is None:
            problems.append(f"{path}: its folder is not in the layer order")
        for inc in direct[path]:
            dst_layer = layer_of(inc)
            if src_layer is None or dst_layer is None:
                continue
            if src_layer not in TOP and rank[dst_layer] > rank[src_layer]:
                problems.append(f"{path}: includes {inc}: {dst_layer} is above {src_layer}")
            if PRIVATE.search(os.path.basename(inc)) and os.path.dirname(inc) != os.path.dirname(path):
                problems.append(f"{path}: includes {inc}, private to {os.path.dirname(inc)}/")
    objects = {unit(p): p for p in files if p.endswith(OBJECT_EXT)}
    for path in files:
        if not path.endswith(OBJECT_EXT):
            continue
        seen, todo = set(), list(direct[path])
        while todo:
            inc = todo.pop()
            if inc in seen:
                continue
            seen.add(inc)
            todo.extend(direct.get(inc, ()))
        graph[path] = {objects[unit(h)] for h in seen if unit(h) in objects and objects[unit(h)] != path}
    for comp in cycles(graph):
        problems.append("cycle: " + " <-> ".join(comp))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering problem(s); the order is LAYERS in scripts/check_layering.py")
        return 1
    print(f"layering ok: {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
