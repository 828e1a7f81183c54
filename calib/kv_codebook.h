// Codebook calibration for the calibrated KV methods (libquant/kv/calibrated.h):
//   quanttool calibrate --method kv-codebook --kv METHOD[:bits=B] --model M --text wiki.valid --out DIR
// runs the model on the calibration text with a full-precision cache that records every key
// (after RoPE, as the cache stores them) and value per layer and kv head, fp16-rounded as the
// quantized cache encodes them, trains what METHOD needs per layer, side and kv head, and writes
// it into the artifacts folder DIR (`<prefix>.safetensors` plus manifest.json; a manifest already
// there with the same head dimension and seed keeps its other files, so one folder can hold
// several methods and precompute's tables).
//   vecinfer  keys: λ_i = √max|K[:,i]|, k̃ = H(k/λ)/√d, k-means (kmeans.h, 256 centroids) per
//             sub-space of 8/B dims; values: k-means on the raw sub-vectors.
//   commvq    keys only, taken back before RoPE (R(t mod ctx)ᵀ k, t the sample's position in its
//             chunk): n = bits·d/cb residual stages, each a k-means (kmeans.h, 2^cb centres, iters
//             Lloyd iterations) on the residual with commvq_project after the init and every M-step.
//   spectral  mean, covariance (double; each sequence's first position weighs 128), eigenvectors by Eigen (descending eigenvalue, each
//             vector's largest-magnitude entry made positive so the sign is fixed), greedy bit
//             allocation under d·B bits, empirical Lloyd-Max per bit width (lloyd_max_empirical.h).
// Seeds: every k-means gets its own seed from --kv-seed, the layer, side, head and sub-space, so
// the output is byte-identical per seed whatever the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "libquant/kv/spec.h"
#include "libquant/model/llama.h"

namespace qt::calib {

// The vectors one side of one layer's kv head saw: n × head_dim.
struct KvSamples {
  int layers = 0, heads = 0, dim = 0;
  int64_t n = 0;
  int ctx = 0;  // tokens per chunk: position t % ctx == 0 starts a sequence (0: no chunk structure)
  std::vector<float> rope_inv_freq;        // the model's RoPE (CommVQ takes the keys back before it)
  std::vector<float> rope_local_inv_freq;  // gemma3: the RoPE of layers with rope_local[l] != 0
  std::vector<uint8_t> rope_local;
  std::vector<std::vector<float>> k, v;  // [layer * heads + head] → n × dim
  const std::vector<float>& at(bool key, int layer, int head) const {
    return (key ? k : v)[size_t(layer) * heads + head];
  }
};

// Runs `chunks` chunks of `ctx` tokens (bos_id ≥ 0: the first token of each) and records them.
KvSamples collect_kv_samples(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks,
                             int32_t bos_id);

// The tables of METHOD (spec.method, its bits) for every layer, side and head, as named tensors
// (calibrated_name), with one line per side on `log`. UserError for a method that is not calibrated.
struct KvCodebookReport {
  std::vector<std::string> lines;
};
using NamedFloats = std::vector<std::pair<std::string, std::vector<float>>>;
// sides: 1 keys, 2 values, 3 both.
NamedFloats train_kv_codebooks(const KvSamples& s, const kv::KVSpec& spec, uint64_t seed, int sides,
                               KvCodebookReport* report, const std::function<void(int done, int total)>& progress);

// Writes `tables` into DIR as `<prefix>.safetensors` and adds it to DIR/manifest.json (created, or
// merged when it is an artifacts manifest of the same head dimension and seed). `info` goes into
// the manifest's "calibrated" entry for the prefix.
void write_calibrated_artifacts(const std::string& dir, const std::string& prefix, const NamedFloats& tables,
                                int head_dim, uint64_t seed,
                                const std::vector<std::pair<std::string, std::string>>& info);

// CommVQ's projection of a stage's k codewords (k × dim, dims (i, i + dim/2) a RoPE plane) onto
// the RoPE-commuting form: codeword 2g+1 = J·codeword 2g (J a 90° turn in every plane), the
// weighted least-squares fit u = (w₀c₀ + w₁Jᵀc₁)/(w₀ + w₁), w the counts (equal when both 0).
void commvq_project(float* centres, const int64_t* counts, int k, int dim);

// UserError for commvq options calibration does not take (cheap: before the model is run).
void check_commvq_options(const kv::KVSpec& spec, int sides);

}  // namespace qt::calib
