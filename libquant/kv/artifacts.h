// `quanttool precompute` artifacts: what the KV methods would otherwise compute at start-up —
// rotations (dense orthogonal Π, WHT signs), JL matrices (QJL's m × d, TurboQuant_prod's d × d)
// and Lloyd-Max codebooks (f_d sphere coordinates, Gaussian, Laplacian, PolarQuant angles) —
// as float32 safetensors files with a JSON manifest:
//   DIR/manifest.json          {"format": "quanttool-kv-artifacts", "version": 1, "head_dim", "seed",
//                               "jl_dim", "bits", "files": {file: [tensor names]}}
//   DIR/rotations.safetensors  rotation.dense [d, d], rotation.wht_signs [d]
//   DIR/jl.safetensors         jl.qjl_m{M} [M, d], jl.prod [d, d]
//   DIR/codebooks.safetensors  codebook.<name>.centroids / .thresholds / .mse
// The same arguments give byte-identical files (no timestamps; fixed tensor order).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qt::kv {

struct PrecomputeOptions {
  int head_dim = 0;
  std::vector<int> bits = {1, 2, 3, 4};
  int jl_dim = 0;  // 0: head_dim
  uint64_t seed = 42;
};

// Writes DIR (created if missing; each file written atomically). Returns the manifest text.
std::string write_kv_artifacts(const std::string& dir, const PrecomputeOptions& o);

class Artifacts {
 public:
  // UserError when DIR is not an artifacts folder, or was made for another head dimension or seed.
  static std::shared_ptr<const Artifacts> load(const std::string& dir, int head_dim, uint64_t seed);
  // The tensor's floats, or null when the artifacts do not hold it.
  const std::vector<float>* find(const std::string& name) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::map<std::string, std::vector<float>> t_;
};

// Names shared by the writer and the codecs' lookups.
std::string codebook_name(int density, int bits, double param);  // density: Density as int

}  // namespace qt::kv
