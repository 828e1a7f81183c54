// `convert --rotate [--rotate-seed N]`: the offline half of QuaRot (arXiv 2404.00456) and
// SpinQuant (arXiv 2405.16406, its R1): the residual stream is turned by a random orthogonal Q,
// folded exactly into the weights, so that outlier channels of the residual are spread over all
// of them — what per-channel int4 weights and per-token int8 activations of the projections that
// read the residual (q/k/v, gate/up, the head) need most.
//
// With h the residual (a row vector) and h' = h·Q, RMSNorm commutes with Q once its weight γ is
// folded into the readers (rms(h·Q) = rms(h)):
//   readers  q/k/v ← input_layernorm, gate/up ← post_attention_layernorm:  W ← (W·diag(γ))·Q
//   writers  o_proj, down_proj (their outputs are added to the residual):  W ← Qᵀ·W (bias too)
//   embedding E ← E·Q;  output head ← (W_head·diag(γ_final))·Q — a tied model is untied, since
//   the head now differs from the embedding by γ_final;  every norm weight ← 1.
// The rotated model is an ordinary checkpoint of the same architecture (transformers and mlx_lm
// load it) and computes the same logits up to fp32 rounding. Q is the QR factor of a Gaussian
// matrix (std::mt19937_64 from the seed, Box–Muller in double; signs fixed so that R's diagonal
// is positive: Haar-distributed), made in double and rounded once to fp32.
//
// Activation statistics (act-stats for --smooth / --imatrix) are per channel of the model they
// were taken on and do not rotate: write the rotated model first (convert --rotate, no --scheme),
// take act-stats on it, then quantize it. Gemma's post-norms sit between a writer and the
// residual, so Gemma is refused. The weights are held in fp32 while rotating (4 bytes a
// parameter), outside GPTQ's bounded-memory path.
#pragma once
#include <cstdint>
#include <vector>

#include "formats/checkpoint.h"

namespace qt::calib {

// The d×d random orthogonal matrix of `seed`, row-major.
std::vector<float> random_orthogonal(int d, uint64_t seed);

// Rotates ck's residual stream by random_orthogonal(hidden, seed) as above (UserError for Gemma).
void rotate_residual(Checkpoint& ck, uint64_t seed);

// SpinQuant's R2 / QuaRot's value rotation, exact offline: every attention head's values turned
// by one random orthogonal R (head_dim², random_orthogonal(head_dim, seed + 1)): v_proj's rows of
// each KV head ← Rᵀ·rows (its bias ·R), o_proj's columns of each query head ← columns·R. The
// attention output of a head is a weighted sum of its values, so it turns with them and o_proj
// turns it back; o_proj's input groups then see the head's channels mixed.
void rotate_heads(Checkpoint& ck, uint64_t seed);

}  // namespace qt::calib
