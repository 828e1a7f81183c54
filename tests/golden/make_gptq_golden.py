#!/usr/bin/env python3
"""Golden for tests/test_calibrated_quant.cpp (calib/gptq.cpp): GPTQ as AutoGPTQ's
`GPTQ.fasterquant` computes it (auto_gptq/modules/gptq.py: dead columns, dampening 1% of the mean
diagonal, H^-1's upper Cholesky factor, lazy block updates, act-order), restated in numpy float64
on a small layer, with the W4A8 int4 grid of Cider (scale = absmax/7 per output channel from the
original weights, q = clamp(rint(w/s) + 8, 0, 15) - 8, value q*s).

Run:  python3 tests/golden/make_gptq_golden.py
Made with numpy 2.x and safetensors (writer); the script prints the versions it ran with.
Output: tests/golden/calib/gptq.safetensors with W [16,128], H [128,128] (float32, what the test
feeds our float32 implementation), codes_block32 and codes_act_order (int32 [16,128], codes in
original column order), block size 32.
"""
import os

import numpy as np
import safetensors
from safetensors.numpy import save_file

rng = np.random.default_rng(1234)
rows, cols, tokens, block = 16, 128, 512, 32
W = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
X = rng.standard_normal((tokens, cols))
X = X + 0.5 * np.roll(X, 1, axis=1) + 0.25 * np.roll(X, 2, axis=1)  # correlated channels
X[:, ::13] *= 6.0                                                   # a few loud ones
X[:, 5] = 0.0                                                       # a dead input
H = (X.T @ X).astype(np.float32)


def gptq(W, H, act_order):
    W = W.astype(np.float64).copy()
    H = H.astype(np.float64).copy()
    scale = np.abs(W).max(axis=1) / 7.0  # static per-channel parameters, from the original W
    scale[scale == 0] = 1.0
    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    perm = np.arange(cols)
    if act_order:
        perm = np.argsort(-np.diag(H), kind="stable")
        W = W[:, perm]
        H = H[perm][:, perm]
    damp = 0.01 * np.mean(np.diag(H))
    H[np.diag_indices(cols)] += damp
    Hinv = np.linalg.inv(H)
    U = np.linalg.cholesky(Hinv).T  # upper: Hinv = U^T U
    Q = np.zeros((rows, cols), dtype=np.int32)
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        W1 = W[:, i1:i2].copy()
        Err1 = np.zeros_like(W1)
        for i in range(i2 - i1):
            w = W1[:, i]
            d = U[i1 + i, i1 + i]
            q = np.clip(np.rint(w / scale) + 8, 0, 15) - 8
            Q[:, i1 + i] = q
            err = (w - q * scale) / d
            W1[:, i:] -= np.outer(err, U[i1 + i, i1 + i:i2])
            Err1[:, i] = err
        W[:, i2:] -= Err1 @ U[i1:i2, i2:]
    out = np.zeros_like(Q)
    out[:, perm] = Q
    return out


here = os.path.dirname(os.path.abspath(__file__))
save_file({"W": W, "H": H, "codes_block32": gptq(W, H, False), "codes_act_order": gptq(W, H, True)},
          os.path.join(here, "calib", "gptq.safetensors"))
print("numpy", np.__version__, "safetensors", safetensors.__version__)
