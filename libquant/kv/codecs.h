// The constructors behind the method table (codec_table.cpp), one file per method family.
// Parameters arrive validated.
#pragma once
#include <memory>
#include <string>

#include "libquant/kv/codec.h"

namespace qt::kv {

std::unique_ptr<Codec> make_affine_codec(int d, int bits, int group, const std::string& name);
std::unique_ptr<Codec> make_kivi_key_codec(int d, int bits, int group, const std::string& name);
// bits: 1..4, or 2.5 / 3.5 (half the rotated coordinates at one bit more).
std::unique_ptr<Codec> make_turboquant_mse_codec(const KVContext& ctx, double bits, const std::string& rot,
                                                 const std::string& name);
// bits b: (b−1)-bit MSE stage + 1-bit QJL of the residual.
std::unique_ptr<Codec> make_turboquant_prod_codec(const KVContext& ctx, int bits, const std::string& rot,
                                                  const std::string& name);
// m sign bits per vector plus its norm.
std::unique_ptr<Codec> make_qjl_codec(const KVContext& ctx, int m, const std::string& name);
// Two b-bit stages: Gaussian then Laplacian Lloyd-Max.
std::unique_ptr<Codec> make_rvq_codec(const KVContext& ctx, int bits, const std::string& rot, const std::string& name);
// Level-1 angles at `bits`, levels 2–4 at max(1, bits − 2), one fp16 radius per 16 coordinates.
std::unique_ptr<Codec> make_polar_codec(const KVContext& ctx, int bits, const std::string& rot, const std::string& name);

// Calibrated methods (calibrated.h: their tables come from calibrate --method kv-codebook).
// VecInfer: product VQ of 8/bits-dim sub-vectors with 256 centroids; keys smoothed and Hadamard-rotated.
std::unique_ptr<Codec> make_vecinfer_codec(const KVContext& ctx, int bits, Side side, const std::string& name);
// SpectralQuant: calibrated eigenvector rotation, per-coordinate widths averaging `bits`.
std::unique_ptr<Codec> make_spectral_codec(const KVContext& ctx, double bits, Side side, const std::string& name);

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

// ‖x‖ over d floats, summed in double.
float l2_norm(const float* x, int d);

// fp16 side data (norms, scales).
void store_half(uint8_t* p, float v);
float load_half(const uint8_t* p);
float round_half(float v);

}  // namespace qt::kv
