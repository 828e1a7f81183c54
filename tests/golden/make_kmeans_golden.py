#!/usr/bin/env python3
"""Golden k-means runs for tests/test_kv_vq.cpp (calib/kmeans.{h,cpp}), made by an independent
numpy implementation of the same algorithm (docs/spec/calibration.md, the choices spelled out in
calib/kmeans.h): k-means++ with the splitmix64 draws of libquant/kv/random.h (ported below),
Lloyd iterations with float32 squared distances accumulated dimension by dimension, ties to the
lowest index, float64 means in point order, the empty-cluster rule "the point farthest from its
centre moves to the empty one", stop when no assignment changes or after max_iter.

Run:  python3 tests/golden/make_kmeans_golden.py
Made with: Python 3 + numpy 2.4.6 (the script prints the versions it ran with). It writes
tests/golden/kv_vq/kmeans.safetensors (a safetensors file written by hand: JSON header + raw
little-endian float32), per case c: c.x [n, dim] (input), c.centroids [k, dim],
c.assign [n] (as float32), c.info [n, dim, k, seed, max_iter, iterations, inertia].
"""
import json
import os
import struct
import sys

import numpy as np

M64 = (1 << 64) - 1


class Rng:  # libquant/kv/random.cpp: splitmix64, uniform = (next >> 11) * 2^-53
    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self):
        return float(self.next() >> 11) * 2.0 ** -53


def sqdist(x, c):
    """float32 squared distances, accumulated over dimensions in order: [n, k]."""
    d = np.zeros((x.shape[0], c.shape[0]), dtype=np.float32)
    for i in range(x.shape[1]):
        t = (x[:, None, i] - c[None, :, i]).astype(np.float32)
        d = (d + t * t).astype(np.float32)
    return d


def kmeans(x, k, seed, max_iter=25):
    n, dim = x.shape
    rng = Rng(seed)
    c = np.zeros((k, dim), dtype=np.float32)
    first = min(n - 1, int(rng.uniform() * n))
    c[0] = x[first]
    dmin = sqdist(x, c[0:1])[:, 0]
    for j in range(1, k):
        cs = np.cumsum(dmin.astype(np.float64))
        total = cs[-1]
        if total > 0:
            u = rng.uniform() * total
            hits = np.nonzero(cs > u)[0]
            pick = int(hits[0]) if hits.size else n - 1
        else:
            rng.uniform()
            pick = j
        c[j] = x[pick]
        dmin = np.minimum(dmin, sqdist(x, c[j:j + 1])[:, 0])
    prev = np.full(n, -1, dtype=np.int64)
    iterations = 0
    for it in range(max_iter):
        d = sqdist(x, c)
        a = np.argmin(d, axis=1)
        dist = d[np.arange(n), a].copy()
        changed = bool(np.any(a != prev))
        prev = a.copy()
        if not changed:
            break
        iterations = it + 1
        cnt = np.bincount(prev, minlength=k)
        for j in range(k):
            if cnt[j] > 0:
                continue
            far = int(np.argmax(dist))
            cnt[prev[far]] -= 1
            prev[far] = j
            cnt[j] += 1
            dist[far] = 0.0
        sums = np.zeros((k, dim), dtype=np.float64)
        np.add.at(sums, prev, x.astype(np.float64))
        for j in range(k):
            if cnt[j] > 0:
                c[j] = (sums[j] / cnt[j]).astype(np.float32)
    d = sqdist(x, c)
    a = np.argmin(d, axis=1)
    dist = d[np.arange(n), a]
    inertia = float(np.sum(dist.astype(np.float64)))
    return c, a, iterations, inertia


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}")
    g = np.random.default_rng(1234)
    cases = []
    # clustered 4-d data (VecInfer's 2-bit sub-vectors), 16 centres
    ctr = g.normal(size=(12, 4)) * 3
    x = (ctr[g.integers(0, 12, 600)] + g.normal(size=(600, 4))).astype(np.float32)
    cases.append(("c4", x, 16, 7))
    # heavy-tailed 8-d data (1-bit sub-vectors), 64 centres
    x = (g.standard_t(3, size=(700, 8))).astype(np.float32)
    cases.append(("c8", x, 64, 42))
    # 10 distinct points repeated: k-means++ runs out of distinct points, clusters go empty
    base = g.normal(size=(10, 2)).astype(np.float32)
    x = base[np.arange(40) % 10]
    cases.append(("dup", x, 16, 3))
    out = []
    for name, x, k, seed in cases:
        c, a, iters, inertia = kmeans(x, k, seed)
        print(f"{name}: n={x.shape[0]} dim={x.shape[1]} k={k} seed={seed} iterations={iters} inertia={inertia:.6f}")
        out += [(f"{name}.x", x), (f"{name}.centroids", c), (f"{name}.assign", a.astype(np.float32)),
                (f"{name}.info", np.array([x.shape[0], x.shape[1], k, seed, 25, iters, inertia], dtype=np.float32))]
    here = os.path.dirname(os.path.abspath(__file__))
    write_safetensors(os.path.join(here, "kv_vq", "kmeans.safetensors"), out)


if __name__ == "__main__":
    main()
