#!/usr/bin/env python3
"""Golden for tests/test_scale_search.cpp (calib/scale_search.cpp): the scale and clip searches
restated in torch float32 from their reference implementations, on one small Linear.

- AWQ scale search: llm-awq awq/quantize/auto_scale.py `_search_module_scale` with the inspected
  module being the Linear itself (as for up_proj -> down_proj): x_max = mean |x| per channel; for
  ratio in {0, 1/20, ..., 19/20}: s = x_max^ratio clamped at 1e-4, s /= sqrt(max(s) min(s));
  W <- Q(W s) / s; loss = mean((x W^T - x W_orig^T)^2); the first least loss wins.
- AWQ clip search: llm-awq awq/quantize/auto_clip.py `auto_clip_layer` (n_grid 20, max_shrink
  0.5, n_sample_token 512: every (n // 512)-th token), on the weight scaled by the chosen s and the
  input divided by it; best max_val per output row and group.
- SmoothQuant alpha search (what `--alpha auto` does; llm-compressor/SmoothQuant grid of 0.05):
  s = max|x|^a / max|W|^(1-a) clamped to [1e-5, 1e5], W8A8 fake quantization (int8 per output
  channel, absmax/127, and the input per token, absmax/127), loss as above; s = 1 is the first
  candidate, then a = 0, 0.05, ..., 1.
Quantizers are quanttool's grids in float32: int4 (scale = absmax/7 per group of 128, q =
clamp(rint(w/scale), -8, 7)) for AWQ, int8 (absmax/127, q in -128..127) for SmoothQuant.

Run:  python3 tests/golden/make_awq_golden.py
Output: tests/golden/calib/awq.safetensors (float32): X [640,256], W [48,256], awq_alpha,
awq_scales [256], awq_loss [1], clip_max [48,2] (512 sampled
tokens: all 640) and clip_max_100 [48,2] (n_sample_token 100: every 6th token), smooth_alpha, smooth_scales [256], smooth_loss [1].
"""
import os

import safetensors
import torch
from safetensors.torch import save_file

torch.manual_seed(17)
rows, cols, tokens, group = 48, 256, 640, 128
X = torch.randn(tokens, cols) * (0.2 + torch.rand(cols) * 2)  # uneven channel scales
X[:, [3, 77, 200]] *= 25.0                                     # a few loud channels
X[::97, 140] = 300.0                                           # a rare massive activation
W = torch.randn(rows, cols) * 0.05
W[:, 10] *= 8.0                                                # a loud weight column


def q_int(w, qmax, qmin, group):
    """quanttool's symmetric int grid, groups of `group` columns (0: the whole row)."""
    g = w.shape[1] if group == 0 else group
    v = w.reshape(w.shape[0], -1, g)
    scale = v.abs().amax(dim=-1, keepdim=True) / qmax
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.clamp(torch.round(v / scale), qmin, qmax)
    return (q * scale).reshape(w.shape)


def q_int4(w):
    return q_int(w, 7.0, -8.0, group)


def q_tokens_int8(x):
    s = x.abs().amax(dim=1, keepdim=True) / 127.0
    s = torch.where(s == 0, torch.ones_like(s), s)
    return torch.clamp(torch.round(x * (1.0 / s)), -128, 127) * s


# --- AWQ scale search (llm-awq _search_module_scale, module = the Linear) ---
org_out = X @ W.T
x_max = X.abs().view(-1, cols).mean(0)
best, best_ratio, best_scales = float("inf"), -1, None
for r in range(20):
    ratio = r / 20
    scales = x_max.pow(ratio).clamp(min=1e-4).view(-1)
    scales = scales / (scales.max() * scales.min()).sqrt()
    Wq = q_int4(W * scales.view(1, -1)) / scales.view(1, -1)
    loss = (org_out - X @ Wq.T).float().pow(2).mean().item()
    if loss < best:
        best, best_ratio, best_scales = loss, ratio, scales
awq_loss = best

# --- AWQ clip search (llm-awq auto_clip_layer) on the scaled weight and input ---
def auto_clip(n_sample_token):
    w = (W * best_scales.view(1, -1)).reshape(rows, 1, -1, group)
    feat = (X / best_scales.view(1, -1)).reshape(1, tokens, -1, group)
    feat = feat[:, 0 :: feat.shape[1] // n_sample_token]
    org_max = w.abs().amax(dim=-1, keepdim=True)
    best_max = org_max.clone()
    min_errs = torch.ones_like(org_max) * 1e9
    org = (feat * w).sum(dim=-1)
    for i_s in range(int(0.5 * 20)):
        max_val = org_max * (1 - i_s / 20)
        cur = torch.clamp(w, -max_val, max_val)
        qw = q_int4(cur.reshape(rows, cols)).reshape(w.shape)
        err = ((feat * qw).sum(dim=-1) - org).pow(2).mean(dim=1).view(min_errs.shape)
        better = err < min_errs
        min_errs[better] = err[better]
        best_max[better] = max_val[better]
    return best_max.reshape(rows, -1), org_max.reshape(rows, -1)


clip_max, org_max = auto_clip(512)
clip_max_100, _ = auto_clip(100)  # 107 tokens, fewer than a group's 128 columns

# --- SmoothQuant alpha search, W8A8 ---
a_max = X.abs().amax(dim=0)
w_max = W.abs().amax(dim=0)


def w8a8_loss(s):
    Wq = q_int(W * s.view(1, -1), 127.0, -128.0, 0) / s.view(1, -1)
    Xq = q_tokens_int8(X / s.view(1, -1)) * s.view(1, -1)
    return (org_out - Xq @ Wq.T).pow(2).mean().item()


s_best, a_best = torch.ones(cols), -1.0
l_best = w8a8_loss(s_best)
for i in range(21):
    a = i / 20
    s = (a_max.double().pow(a) / w_max.double().pow(1 - a)).clamp(1e-5, 1e5).float()
    l = w8a8_loss(s)
    if l < l_best:
        s_best, a_best, l_best = s, a, l

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calib", "awq.safetensors")
save_file({"X": X.contiguous(), "W": W.contiguous(),
           "awq_alpha": torch.tensor([best_ratio], dtype=torch.float32), "awq_scales": best_scales.contiguous(),
           "awq_loss": torch.tensor([awq_loss], dtype=torch.float32), "clip_max": clip_max.contiguous(),
           "clip_max_100": clip_max_100.contiguous(),
           "smooth_alpha": torch.tensor([a_best], dtype=torch.float32), "smooth_scales": s_best.contiguous(),
           "smooth_loss": torch.tensor([l_best], dtype=torch.float32)}, out)
print(f"torch {torch.__version__}, safetensors {safetensors.__version__}: wrote {out}")
print(f"awq ratio {best_ratio} loss {awq_loss:.6g}; clipped groups {(clip_max < org_max).sum().item()}"
      f" of {clip_max.numel()}; smooth alpha {a_best} loss {l_best:.6g} (unit {w8a8_loss(torch.ones(cols)):.6g})")
