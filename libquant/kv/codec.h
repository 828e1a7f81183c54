// A KV method at its parameters, for one side (keys or values) of one layer: how a vector (or
// a group of token vectors) of head_dim floats becomes bytes, and how attention reads the bytes.
//
// Attention never rebuilds the cache in head space. Each codec has a *domain* of domain_dim()
// floats per token — the rotated space (TurboQuant, RVQ, PolarQuant), the sketch space (QJL),
// head space itself (affine, KIVI) — and decodes a tile of 32 tokens into it, into L1, where
// the tile is scored against every query of the tile at once:
//   keys:   score(q, k̂_j) = ⟨query_to_domain(q), decode(j)⟩  — the query is rotated/sketched
//           once, the keys never leave the domain (TurboQuant's "Πq, then a centroid lookup per
//           coordinate"; QJL's "⟨Sq, sign(Sk)⟩ · ‖k‖·√(π/2)/m").
//   values: Σ_j p_j v̂_j = domain_to_head(Σ_j p_j decode(j))  — mixed in the domain, mapped back
//           once per query (Πᵀ, Sᵀ).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libquant/kv/lloyd_max.h"
#include "libquant/kv/random.h"
#include "libquant/kv/spec.h"

namespace qt::kv {

enum class Side { Key, Value };
const char* side_name(Side s);

class Artifacts;

// The model's RoPE (rotate-half layout: pairs (i, i + d/2) of each head) at positions
// [0, n_pos): cos/sin of angle float(pos)·inv_freq[i] in float, as ops::RopeTable computes them.
// Codecs that store pre-RoPE keys (CommVQ) rotate with it at score time.
struct RopeAngles {
  int half = 0, n_pos = 0;
  std::vector<float> cos, sin;  // [pos][half]
  static std::shared_ptr<const RopeAngles> make(const std::vector<float>& inv_freq, int n_pos);
  // y = R(pos) x (inverse: R(pos)ᵀ x = R(−pos) x); x and y of 2·half floats, may be the same.
  void rotate(const float* x, int64_t pos, float* y, bool inverse = false) const;
};

// What codecs share: the head dimension, the seed and, when given, precomputed artifacts.
// Codebooks and matrices come from the artifacts when loaded, else are computed (and kept for
// the process): the two paths give identical floats.
struct KVContext {
  int head_dim = 0;
  uint64_t seed = 42;
  std::shared_ptr<const Artifacts> artifacts;
  int layer = 0;                           // the layer the codec is for: calibrated methods read their tables per layer
  std::shared_ptr<const RopeAngles> rope;  // the model's RoPE at the cache's positions (null: unknown)

  // Centroids and thresholds as floats (the values the codecs use).
  struct FloatCodebook {
    std::vector<float> c, t;
    float mse = 0;
  };
  FloatCodebook codebook(Density d, int bits, double param) const;
  Rotation rotation(const std::string& kind) const;
  // m × head_dim JL matrix (`purpose` JL: QJL's, orthogonalized; ProdJL: TurboQuant_prod's, i.i.d.).
  std::vector<float> jl(int m, SeedUse purpose) const;
};

class Codec {
 public:
  virtual ~Codec() = default;
  int head_dim() const { return d_; }
  virtual int domain_dim() const { return d_; }
  // Tokens encoded together (KIVI keys: G tokens per channel group); 1 for per-token methods.
  virtual int token_group() const { return 1; }
  // Bytes of one token group of one kv head: codes and side data (norms, scales) as stored.
  virtual size_t group_bytes() const = 0;
  double bits_per_element() const { return 8.0 * double(group_bytes()) / (double(token_group()) * d_); }

  // Encodes token_group() vectors, rows `stride` floats apart, into group_bytes() bytes.
  virtual void encode(const float* x, int64_t stride, uint8_t* out) const = 0;
  // The same for the group whose first token is at position `pos` (the cache calls this one):
  // codecs of pre-RoPE keys (CommVQ) undo RoPE there. decode(codes, j0, …) is at positions j0 ….
  virtual void encode_at(const float* x, int64_t stride, int64_t pos, uint8_t* out) const {
    (void)pos;
    encode(x, stride, out);
  }
  // Per-token codecs (token_group() == 1): n tokens at positions pos0 …, rows d floats apart, into
  // n · group_bytes() bytes; the same bytes as encode_at token by token (codecs that share work
  // across tokens — CommVQ's codebook passes — override it).
  virtual void encode_tokens_at(const float* x, int n, int64_t pos0, uint8_t* out) const {
    for (int t = 0; t < n; ++t) encode_at(x + int64_t(t) * d_, d_, pos0 + t, out + size_t(t) * group_bytes());
  }
  // Decodes positions j0 … j0+n−1 of one head's code array (groups back to back) into domain
  // vectors: out[i * domain_dim() + c].
  virtual void decode(const uint8_t* codes, int64_t j0, int n, float* out) const = 0;
  // Keys: ⟨query_to_domain(q), decode(j)⟩ = q · k̂_j.
  virtual void query_to_domain(const float* q, float* out) const;
  // The same for n queries, rows d floats apart, into rows domain_dim() apart (sketching codecs
  // project them together).
  virtual void queries_to_domain(const float* q, int n, float* out) const;
  // Values: out += the head-space vector of a domain accumulator.
  virtual void domain_to_head(const float* acc, float* out) const;

  // Calibrated methods (calibrated.h) keep their tables per kv head: the codec of kv head h. The
  // others have one codec for every head (itself). The cache calls every method through it.
  virtual const Codec& for_head(int h) const {
    (void)h;
    return *this;
  }
  // Keys scored straight from the codes by a per-query lookup table (asymmetric distance
  // computation, VecInfer): table_dim() > 0 floats built once per query from its domain vector,
  // then score_codes(table, …)[i] = ⟨query_to_domain(q), decode(j0 + i)⟩ for i < n. 0: the cache
  // decodes tiles instead.
  virtual int table_dim() const { return 0; }
  // Below this many keys the cache decodes tiles instead (a table costs more than it saves).
  virtual int table_min_keys() const { return 0; }
  virtual void query_table(const float* qd, float* table) const;
  virtual void score_codes(const float* table, const uint8_t* codes, int64_t j0, int n, float* out) const;

  // The reconstruction of position j in head space (tests, calibration): domain_to_head(decode).
  void reconstruct(const uint8_t* codes, int64_t j, float* out) const;
  const std::string& name() const { return name_; }

 protected:
  Codec(int d, std::string name) : d_(d), name_(std::move(name)) {}
  int d_;
  std::string name_;
};

// The method table: builds the codec of `spec` for `side`. UserError for an unknown method, an
// unknown parameter, bits the method does not have, a group or rotation the head dimension
// cannot take, or a method that cannot encode this side.
std::unique_ptr<Codec> make_codec(const KVSpec& spec, Side side, const KVContext& ctx);
// Methods in the table, for messages and --help.
std::string kv_method_names();
// The bit widths a method has, and its default (UserError for an unknown method).
std::vector<double> kv_method_bits(const std::string& method);
double kv_method_default_bits(const std::string& method);
// The sides a method encodes: "kv", or "k" (keys only).
std::string kv_method_sides(const std::string& method);
// Whether a method's tables come from calibrate --method kv-codebook (false for an unknown one),
// and the names of those that do, for messages.
bool kv_method_calibrated(const std::string& method);
std::string calibrated_kv_method_names();
// How --device cuda runs a method: Native — CUDA kernels of its own (libquant/cuda/kv.cu; the
// parameters those kernels lack go through the host codec); HostCodec — this CPU codec on host
// copies of each layer's K/V, the reconstruction sent back in head space (libquant/cuda/kv_host.h);
// None — refused.
enum class CudaKv { None, Native, HostCodec };
CudaKv kv_method_cuda(const std::string& method);  // None for an unknown method; f16 is Native
// Whether the CUDA backend runs a method (f16 included; false for an unknown one), and their names
// ("f16, affine, kivi, turboquant_mse (native); turboquant_prod, … (host codec)").
bool kv_method_on_cuda(const std::string& method);
std::string cuda_kv_method_names();

// ---- bit packing shared by the codecs: b-bit codes, LSB first, back to back --------------------
inline void put_bits(uint8_t* p, int64_t idx, int bits, uint32_t v) {
  const int64_t bit = idx * bits;
  for (int i = 0; i < bits; ++i) {
    const int64_t b = bit + i;
    if ((v >> i) & 1u) p[b >> 3] |= uint8_t(1u << (b & 7));
  }
}
// Codes of at most 8 bits span at most two bytes; the second is read only when needed (no
// read past the code array).
inline uint32_t get_bits_at(const uint8_t* p, int64_t bit, int bits) {
  const int64_t byte = bit >> 3;
  const int sh = int(bit & 7);
  uint32_t w = p[byte];
  if (sh + bits > 8) w |= uint32_t(p[byte + 1]) << 8;
  return (w >> sh) & ((1u << bits) - 1u);
}
inline uint32_t get_bits(const uint8_t* p, int64_t idx, int bits) { return get_bits_at(p, idx * bits, bits); }
// n codes of `bits` bits starting at bit offset bit0, into bytes (the decoders' hot loop).
inline void unpack_codes(const uint8_t* p, int64_t bit0, int n, int bits, uint8_t* out) {
  if ((bit0 & 7) == 0 && (bits == 1 || bits == 2 || bits == 4 || bits == 8)) {
    const uint8_t* q = p + (bit0 >> 3);
    const int per = 8 / bits;
    const uint32_t mask = (1u << bits) - 1u;
    int i = 0;
    for (; i + per <= n; i += per, ++q)
      for (int k = 0; k < per; ++k) out[i + k] = uint8_t((*q >> (k * bits)) & mask);
    for (int k = 0; i < n; ++i, ++k) out[i] = uint8_t((*q >> (k * bits)) & mask);
    return;
  }
  int i = 0;
  if ((bit0 & 7) == 0) {  // 3, 5, 6, 7 bits: 8 codes from every `bits` whole bytes
    const uint8_t* q = p + (bit0 >> 3);
    const uint64_t mask = (1u << bits) - 1u;
    for (; i + 8 <= n; i += 8, q += bits) {
      uint64_t w = 0;
      for (int b = 0; b < bits; ++b) w |= uint64_t(q[b]) << (8 * b);
      for (int k = 0; k < 8; ++k) out[i + k] = uint8_t((w >> (k * bits)) & mask);
    }
  }
  for (; i < n; ++i) out[i] = uint8_t(get_bits_at(p, bit0 + int64_t(i) * bits, bits));
}
// The same at an arbitrary bit offset (codes of mixed widths in one vector).
inline void put_bits_at(uint8_t* p, int64_t bit, int bits, uint32_t v) {
  for (int i = 0; i < bits; ++i)
    if ((v >> i) & 1u) p[(bit + i) >> 3] |= uint8_t(1u << ((bit + i) & 7));
}
// The inverse of unpack_codes: n codes of `bits` bits OR-ed in at bit offset bit0 (the bytes
// start zeroed).
inline void pack_codes(uint8_t* p, int64_t bit0, int n, int bits, const uint8_t* codes) {
  int i = 0;
  if ((bit0 & 7) == 0) {  // 8 codes into every `bits` whole bytes
    uint8_t* q = p + (bit0 >> 3);
    for (; i + 8 <= n; i += 8, q += bits) {
      uint64_t w = 0;
      for (int k = 0; k < 8; ++k) w |= uint64_t(codes[i + k]) << (k * bits);
      for (int b = 0; b < bits; ++b) q[b] |= uint8_t(w >> (8 * b));
    }
  }
  for (; i < n; ++i) put_bits_at(p, bit0 + int64_t(i) * bits, bits, codes[i]);
}
// codes[i] = codebook_index(t, nt, x[i]) for i < n, threshold by threshold (vectorizes).
inline void codebook_indices(const float* t, int nt, const float* x, int n, uint8_t* codes) {
  for (int i = 0; i < n; ++i) codes[i] = 0;
  for (int k = 0; k < nt; ++k)
    for (int i = 0; i < n; ++i) codes[i] += x[i] > t[k];
}
inline size_t packed_bytes(int64_t n, int bits) { return size_t((n * bits + 7) / 8); }

}  // namespace qt::kv
