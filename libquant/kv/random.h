// Seeded randomness for the KV methods: rotations (TurboQuant, RVQ, PolarQuant) and
// Johnson–Lindenstrauss matrices (QJL, TurboQuant_prod). Everything is generated in double from
// a splitmix64 stream (normals by Box–Muller) and rounded to float once, so the same seed gives
// the same matrices on any machine, and `precompute` artifacts equal what a run computes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qt::kv {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1), 53 bits
  double normal();   // N(0, 1), Box–Muller (both values of a pair used)
 private:
  uint64_t s_;
  bool have_ = false;
  double spare_ = 0;
};

// d × d random orthogonal matrix, row-major: modified Gram–Schmidt (twice, in double) on the
// rows of an i.i.d. Gaussian matrix — the QR of a Gaussian matrix, as TurboQuant builds Π.
std::vector<float> random_orthogonal(int d, uint64_t seed);
// ±1 per coordinate (the random signs of the fast Walsh–Hadamard rotation).
std::vector<float> random_signs(int d, uint64_t seed);
// m × d i.i.d. N(0, 1), row-major. `orthogonalize`: QJL's reference replaces each d × d block
// of rows by its orthonormal factor times √d (rows stay N(0,1)-scaled, blocks orthogonal).
std::vector<float> gaussian_matrix(int m, int d, uint64_t seed, bool orthogonalize);

// Sub-seeds, so one --seed gives independent matrices per purpose.
enum class SeedUse : uint64_t { Rotation = 1, Signs = 2, JL = 3, ProdJL = 4 };
inline uint64_t sub_seed(uint64_t seed, SeedUse u) { return seed * 0x9E3779B97F4A7C15ull + uint64_t(u); }

// A rotation of R^d: Walsh–Hadamard with random signs (y = H·(s ⊙ x)/√d, d a power of two,
// O(d log d)) or a dense random orthogonal matrix (O(d²)).
class Rotation {
 public:
  Rotation() = default;
  // kind "wht" or "dense"; UserError for a WHT of a dimension that is not a power of two
  // (naming the way out: rot=dense).
  Rotation(const std::string& kind, int d, uint64_t seed, const std::vector<float>* given = nullptr);
  int dim() const { return d_; }
  const std::string& kind() const { return kind_; }
  void apply(const float* x, float* y) const;              // y = Π x   (x == y allowed)
  void inverse(const float* y, float* x) const;            // x = Πᵀ y  (x == y allowed)
  const std::vector<float>& matrix() const { return m_; }  // dense: d×d; wht: the d signs
 private:
  std::string kind_;
  int d_ = 0;
  std::vector<float> m_;
};

// In-place unnormalized fast Walsh–Hadamard transform of length d (a power of two).
void fwht(float* x, int d);

}  // namespace qt::kv
