// The constructors behind the method table (codec_table.cpp), one file per method family.
// Parameters arrive validated.
#pragma once
#include <memory>
#include <string>

#include "libquant/kv/codec.h"

namespace qt::kv {

std::unique_ptr<Codec> make_affine_codec(int d, int bits, int group, const std::string& name);
std::unique_ptr<Codec> make_kivi_key_codec(int d, int bits, int group, const std::string& name);
// The first n_outlier rotated coordinates at outlier_bits, the rest at bits (all 1..4);
// n_outlier = d: every coordinate at outlier_bits.
std::unique_ptr<Codec> make_turboquant_mse_codec(const KVContext& ctx, int bits, int n_outlier, int outlier_bits,
                                                 const std::string& rot, const std::string& name);
// turboquant-mlx's V2: affine groups of the rotated vector (rot "wht" or "dense"), with
// `qjl` a 1-bit QJL sketch of the residual on top (codec_affine_rot.cpp).
std::unique_ptr<Codec> make_affine_rotated_codec(const KVContext& ctx, int bits, int group, const std::string& rot,
                                                 bool qjl, const std::string& name);
// RaBitQ (and extended RaBitQ at 2–4 bits): sign / grid codes of the rotated unit vector with
// its norm and ⟨ō, o⟩, scored by the unbiased estimator (codec_rabitq.cpp).
std::unique_ptr<Codec> make_rabitq_codec(const KVContext& ctx, int bits, const std::string& rot,
                                         const std::string& name);
// bits b: (b−1)-bit MSE stage + 1-bit QJL of the residual.
std::unique_ptr<Codec> make_turboquant_prod_codec(const KVContext& ctx, int bits, const std::string& rot,
                                                  const std::string& name);
// m sign bits per vector plus its norm.
std::unique_ptr<Codec> make_qjl_codec(const KVContext& ctx, int m, const std::string& name);
// Two b-bit stages: Gaussian then Laplacian Lloyd-Max.
std::unique_ptr<Codec> make_rvq_codec(const KVContext& ctx, int bits, const std::string& rot, const std::string& name);
// Level-1 angles at `bits`, levels 2–4 at max(1, bits − 2), one fp16 radius per 16 coordinates.
std::unique_ptr<Codec> make_polar_codec(const KVContext& ctx, int bits, const std::string& rot,
                                        const std::string& name);

// Calibrated methods (calibrated.h: their tables come from calibrate --method kv-codebook).
// VecInfer: product VQ of 8/bits-dim sub-vectors with 256 centroids; keys smoothed and Hadamard-rotated.
std::unique_ptr<Codec> make_vecinfer_codec(const KVContext& ctx, int bits, Side side, const std::string& name);
// SpectralQuant: calibrated eigenvector rotation, per-coordinate widths averaging `bits`.
std::unique_ptr<Codec> make_spectral_codec(const KVContext& ctx, double bits, Side side, const std::string& name);

// CommVQ: residual VQ of the pre-RoPE key, n = bits·d/cb stages of 2^cb codewords (codebooks
// RoPE-commutative unless comm = false), RoPE applied at score time from the stored positions.
// Keys only. Its tables' method name in the artifacts: commvq_table_method(cb, comm).
std::unique_ptr<Codec> make_commvq_codec(const KVContext& ctx, double bits, int cb, bool comm, Side side,
                                         const std::string& name);
std::string commvq_table_method(int cb, bool comm);

// Codecs whose domain is the rotated head space (TurboQuant, RVQ, PolarQuant): queries are
// rotated once, value accumulators rotated back once. A default-constructed rotation (dim 0)
// is the identity (polar rot=none).
class RotatedCodec : public Codec {
 public:
  void query_to_domain(const float* q, float* out) const override;
  void domain_to_head(const float* acc, float* out) const override;

 protected:
  RotatedCodec(int d, std::string name, Rotation rot) : Codec(d, std::move(name)), rot_(std::move(rot)) {}
  Rotation rot_;
};

// For a domain of 2d (the rotated head, then a QJL sketch S·x): out += Πᵀ(acc[0:d] + Sᵀ acc[d:2d]),
// S d × d. TurboQuant_prod and affine rot+QJL (defined in codec_turboquant.cpp).
void qjl_domain_to_head(const Rotation& rot, const float* acc, const float* S, int d, float* out);

// ‖x‖ over d floats, summed in double.
float l2_norm(const float* x, int d);

// fp16 side data (norms, scales).
void store_half(uint8_t* p, float v);
float load_half(const uint8_t* p);
float round_half(float v);

}  // namespace qt::kv
