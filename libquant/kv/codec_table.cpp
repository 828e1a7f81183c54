// The KV method table: one row per method (name, the sides it encodes, its bit widths, its
// parameters, its constructor), plus what every codec shares (KVContext, fp16 side data).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "formats/error.h"
#include "formats/tensor.h"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {

const char* side_name(Side s) { return s == Side::Key ? "keys" : "values"; }

void store_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
float round_half(float v) { return f16_to_f32(f32_to_f16(v)); }

void Codec::query_to_domain(const float* q, float* out) const { std::memcpy(out, q, sizeof(float) * d_); }
void Codec::queries_to_domain(const float* q, int n, float* out) const {
  for (int v = 0; v < n; ++v) query_to_domain(q + int64_t(v) * d_, out + int64_t(v) * domain_dim());
}
void Codec::query_table(const float*, float*) const { throw std::logic_error(name_ + ": no lookup-table scoring"); }
void Codec::score_codes(const float*, const uint8_t*, int64_t, int, float*) const {
  throw std::logic_error(name_ + ": no lookup-table scoring");
}
void Codec::domain_to_head(const float* acc, float* out) const {
  for (int i = 0; i < d_; ++i) out[i] += acc[i];
}
void RotatedCodec::query_to_domain(const float* q, float* out) const {
  if (rot_.dim())
    rot_.apply(q, out);
  else
    std::memcpy(out, q, sizeof(float) * d_);
}
void RotatedCodec::domain_to_head(const float* acc, float* out) const {
  float tmp[1024];
  if (rot_.dim())
    rot_.inverse(acc, tmp);
  else
    std::memcpy(tmp, acc, sizeof(float) * d_);
  for (int i = 0; i < d_; ++i) out[i] += tmp[i];
}
float l2_norm(const float* x, int d) {
  double s = 0;
  for (int i = 0; i < d; ++i) s += double(x[i]) * x[i];
  return float(std::sqrt(s));
}

void Codec::reconstruct(const uint8_t* codes, int64_t j, float* out) const {
  std::vector<float> dom(domain_dim());
  decode(codes, j, 1, dom.data());
  std::fill(out, out + d_, 0.0f);
  domain_to_head(dom.data(), out);
}

// ---- shared codebooks and matrices ----------------------------------------------------------

namespace {
std::mutex g_mu;
std::map<std::string, KVContext::FloatCodebook> g_codebooks;
std::map<std::string, std::vector<float>> g_matrices;
}  // namespace

KVContext::FloatCodebook KVContext::codebook(Density d, int bits, double param) const {
  const std::string n = codebook_name(int(d), bits, param);
  if (artifacts) {
    const auto *c = artifacts->find(n + ".centroids"), *t = artifacts->find(n + ".thresholds"),
               *m = artifacts->find(n + ".mse");
    if (c && t && m) return {*c, *t, m->empty() ? 0.0f : (*m)[0]};
  }
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_codebooks.find(n);
  if (it != g_codebooks.end()) return it->second;
  const Codebook cb = lloyd_max(d, 1 << bits, param);
  FloatCodebook f;
  f.c.assign(cb.centroids.begin(), cb.centroids.end());
  f.t.assign(cb.thresholds.begin(), cb.thresholds.end());
  f.mse = float(cb.mse);
  return g_codebooks[n] = f;
}

Rotation KVContext::rotation(const std::string& kind) const {
  const std::string n = kind == "wht" ? "rotation.wht_signs" : "rotation.dense";
  if (kind != "wht" && kind != "dense") user_error("rot={}: unknown rotation (wht, dense)", kind);
  if (artifacts)
    if (const auto* m = artifacts->find(n)) return Rotation(kind, head_dim, seed, m);
  std::lock_guard<std::mutex> lock(g_mu);
  const std::string key = fmt::format("{}:{}:{}", n, head_dim, seed);
  auto it = g_matrices.find(key);
  if (it != g_matrices.end()) return Rotation(kind, head_dim, seed, &it->second);
  Rotation r(kind, head_dim, seed);
  g_matrices[key] = r.matrix();
  return r;
}

std::vector<float> KVContext::jl(int m, SeedUse purpose) const {
  const std::string n = purpose == SeedUse::ProdJL ? std::string("jl.prod") : fmt::format("jl.qjl_m{}", m);
  if (artifacts)
    if (const auto* t = artifacts->find(n)) return *t;
  std::lock_guard<std::mutex> lock(g_mu);
  const std::string key = fmt::format("{}:{}:{}", n, head_dim, seed);
  auto it = g_matrices.find(key);
  if (it != g_matrices.end()) return it->second;
  return g_matrices[key] = gaussian_matrix(m, head_dim, sub_seed(seed, purpose), purpose == SeedUse::JL);
}

// ---- the table ---------------------------------------------------------------------------------

namespace {

struct Args {
  const KVSpec& spec;
  Side side;
  const KVContext& ctx;
  double bits;
  std::string what;  // "--kv-k kivi:bits=3" for messages

  int group(int fallback) const {
    const double g = spec.number("group", fallback, what);
    const int d = ctx.head_dim;
    if (g != 32 && g != 64 && g != 128) user_error("{}: group {} is not one of 32, 64, 128", what, g);
    if (g > d || d % int(g)) user_error("{}: group {} does not fit head dimension {}", what, g, d);
    return int(g);
  }
  std::string rot() const { return spec.str("rot", "wht"); }
  // A whole-number parameter in [lo, hi] (UserError naming the flag otherwise).
  int integer(const std::string& k, int fallback, int lo, int hi) const {
    const double v = spec.number(k, fallback, what);
    if (v != std::floor(v) || v < lo || v > hi)
      user_error("{}: {}={} is not a whole number in {}..{}", what, k, v, lo, hi);
    return int(v);
  }
};

// affine[:rot=qr|wht[,qjl=1]]: without rot (or rot=none) the plain per-token groups
// (codec_affine.cpp); with a rotation turboquant-mlx's V2 "rotated", with qjl=1 its "rot+QJL".
std::unique_ptr<Codec> make_affine_row(const Args& a) {
  const std::string rot = a.spec.str("rot", "none");
  const int qjl = a.integer("qjl", 0, 0, 1);
  if (rot == "none") {
    if (qjl) user_error("{}: qjl=1 corrects a rotated code; give rot=qr or rot=wht", a.what);
    return make_affine_codec(a.ctx.head_dim, int(a.bits), a.group(32), a.spec.text());
  }
  if (rot != "qr" && rot != "dense" && rot != "wht") user_error("{}: rot={} (qr, wht or none)", a.what, rot);
  return make_affine_rotated_codec(a.ctx, int(a.bits), a.group(32), rot == "wht" ? "wht" : "dense", qjl == 1,
                                   a.spec.text());
}

// turboquant_mse: bits=B (1..4, or any fractional B with B·d whole: the first (B − ⌊B⌋)·d rotated
// coordinates at ⌊B⌋ + 1 bits), or an integer bits=b with n_outlier=N coordinates at
// outlier_bits=H (default b + 1).
std::unique_ptr<Codec> make_turboquant_mse_row(const Args& a) {
  const int d = a.ctx.head_dim;
  if (!(a.bits >= 1 && a.bits <= 4))
    user_error("{}: turboquant_mse has no {}-bit variant (bits: 1..4, fractional ones too, e.g. 2.25)", a.what, a.bits);
  const int b = int(std::floor(a.bits));
  if (a.spec.has("n_outlier") || a.spec.has("outlier_bits")) {
    if (a.bits != b)
      user_error("{}: with n_outlier, bits is the regular channels' whole width (got {})", a.what, a.bits);
    if (!a.spec.has("n_outlier")) user_error("{}: outlier_bits needs n_outlier", a.what);
    const int n = a.integer("n_outlier", 0, 0, d);
    const int h = a.integer("outlier_bits", std::min(b + 1, 4), 1, 4);
    return make_turboquant_mse_codec(a.ctx, b, n, h, a.rot(), a.spec.text());
  }
  if (a.bits == b) return make_turboquant_mse_codec(a.ctx, b, d, b, a.rot(), a.spec.text());
  const double n = (a.bits - b) * d;
  if (std::fabs(n - std::round(n)) > 1e-9)
    user_error("{}: {} bits is not a whole number of {}-bit coordinates out of {} (a multiple of 1/{})", a.what, a.bits,
               b + 1, d, d);
  return make_turboquant_mse_codec(a.ctx, b, int(std::round(n)), b + 1, a.rot(), a.spec.text());
}

struct Row {
  const char* name;
  std::vector<double> bits;
  double default_bits;
  std::set<std::string> params;  // besides bits and r
  std::function<std::unique_ptr<Codec>(const Args&)> make;
  const char* sides = "kv";         // "k": keys only
  bool any_bits = false;            // `bits` is checked by the constructor (fractional rates), not the list
  bool calibrated = false;          // its tables come from calibrate --method kv-codebook (calibrated.h)
  CudaKv cuda = CudaKv::HostCodec;  // how --device cuda runs it (codec.h)
};

const std::vector<Row>& table() {
  static const std::vector<Row> rows = {
      {"affine", {2, 3, 4, 8}, 4, {"group", "rot", "qjl"}, make_affine_row, "kv", false, false, CudaKv::Native},
      {"kivi",
       {2, 3, 4, 8},
       2,
       {"group"},
       [](const Args& a) {
         const int g = a.group(32);
         return a.side == Side::Key ? make_kivi_key_codec(a.ctx.head_dim, int(a.bits), g, a.spec.text())
                                    : make_affine_codec(a.ctx.head_dim, int(a.bits), g, a.spec.text());
       },
       "kv",
       false,
       false,
       CudaKv::Native},
      {"turboquant_mse",
       {1, 2, 2.5, 3, 3.5, 4},
       3,
       {"rot", "n_outlier", "outlier_bits"},
       make_turboquant_mse_row,
       "kv",
       true,
       false,
       CudaKv::Native},
      {"turboquant_prod",
       {1, 2, 3, 4},
       3,
       {"rot"},
       [](const Args& a) { return make_turboquant_prod_codec(a.ctx, int(a.bits), a.rot(), a.spec.text()); }},
      {"qjl",
       {1, 2, 3, 4},
       1,
       {"m"},
       [](const Args& a) {
         const double m = a.spec.number("m", a.bits * a.ctx.head_dim, a.what);
         if (m < 8 || m > 16 * 1024 || m != std::floor(m))
           user_error("{}: m={} is not a sketch size in 8..16384", a.what, m);
         return make_qjl_codec(a.ctx, int(m), a.spec.text());
       }},
      {"rvq",
       {1, 2, 3},
       1,
       {"rot"},
       [](const Args& a) { return make_rvq_codec(a.ctx, int(a.bits), a.rot(), a.spec.text()); }},
      {"polar",
       {2, 3, 4},
       4,
       {"rot"},
       [](const Args& a) {
         const std::string rot = a.spec.str("rot", "wht");
         if (rot != "wht" && rot != "dense" && rot != "none")
           user_error("{}: rot={} (wht, dense or none)", a.what, rot);
         return make_polar_codec(a.ctx, int(a.bits), rot, a.spec.text());
       }},
      {"rabitq",
       {1, 2, 3, 4},
       1,
       {"rot"},
       [](const Args& a) {
         const std::string rot = a.spec.str("rot", "wht");
         if (rot != "wht" && rot != "dense" && rot != "qr") user_error("{}: rot={} (wht or qr)", a.what, rot);
         return make_rabitq_codec(a.ctx, int(a.bits), rot == "wht" ? "wht" : "dense", a.spec.text());
       }},
      // calibrated (calibrated.h): tables per layer, side and kv head from calibrate --method kv-codebook
      {"vecinfer",
       {1, 2, 4},
       2,
       {},
       [](const Args& a) { return make_vecinfer_codec(a.ctx, int(a.bits), a.side, a.spec.text()); },
       "kv",
       false,
       true},
      {"spectral",
       {1, 2, 3, 4},
       3,
       {},
       [](const Args& a) { return make_spectral_codec(a.ctx, a.bits, a.side, a.spec.text()); },
       "kv",
       false,
       true},
      // bits per element = n·cb/d: n residual stages of 2^cb codewords (cb 2, 4 or 8); comm=0 the
      // unprojected ablation. 0.25 at d = 64 is VeloxQuant-MLX's 64× (d = 128, 4 stages of 8 bits).
      {"commvq",
       {0.25, 0.5, 1, 2, 3},
       2,
       {"cb", "comm"},
       [](const Args& a) {
         const int cb = a.integer("cb", 8, 2, 8);
         if (cb != 2 && cb != 4 && cb != 8)
           user_error("{}: cb={} is not a codebook width of 2, 4 or 8 bits", a.what, cb);
         if (!(a.bits > 0 && a.bits <= 8))
           user_error("{}: bits={} is not a rate in (0, 8] bits per element", a.what, a.bits);
         return make_commvq_codec(a.ctx, a.bits, cb, a.integer("comm", 1, 0, 1) == 1, a.side, a.spec.text());
       },
       "k",
       true,
       true},
  };
  return rows;
}

}  // namespace

std::string kv_method_names() {
  std::string s = "f32, f16, bf16";
  for (const Row& r : table()) s += std::string(", ") + r.name;
  return s;
}

namespace {
const Row& row_of(const std::string& method) {
  for (const Row& r : table())
    if (method == r.name) return r;
  user_error("unknown KV method '{}' (known: {})", method, kv_method_names());
}
}  // namespace

std::vector<double> kv_method_bits(const std::string& method) { return row_of(method).bits; }
double kv_method_default_bits(const std::string& method) { return row_of(method).default_bits; }
std::string kv_method_sides(const std::string& method) { return row_of(method).sides; }

bool kv_method_calibrated(const std::string& method) {
  for (const Row& r : table())
    if (method == r.name) return r.calibrated;
  return false;
}

CudaKv kv_method_cuda(const std::string& method) {
  if (method == "f16") return CudaKv::Native;  // the full-precision cache cuda keeps
  for (const Row& r : table())
    if (method == r.name) return r.cuda;
  return CudaKv::None;
}

bool kv_method_on_cuda(const std::string& method) { return kv_method_cuda(method) != CudaKv::None; }

std::string cuda_kv_method_names() {
  std::string native = "f16", host;
  for (const Row& r : table())
    if (r.cuda == CudaKv::Native)
      native += ", " + std::string(r.name);
    else if (r.cuda == CudaKv::HostCodec)
      host += (host.empty() ? "" : ", ") + std::string(r.name);
  return native + " (native)" + (host.empty() ? "" : "; " + host + " (host codec)");
}

std::string calibrated_kv_method_names() {
  std::string s;
  for (const Row& r : table())
    if (r.calibrated) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

std::unique_ptr<Codec> make_codec(const KVSpec& spec, Side side, const KVContext& ctx) {
  const std::string what = std::string(side == Side::Key ? "--kv-k " : "--kv-v ") + spec.text();
  const auto& rows = table();
  auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return spec.method == r.name; });
  if (it == rows.end()) user_error("{}: unknown KV method '{}' (known: {})", what, spec.method, kv_method_names());
  for (auto& [k, v] : spec.params)
    if (k != "bits" && k != "r" && !it->params.count(k))
      user_error("{}: {} has no parameter '{}'", what, spec.method, k);
  const double bits = spec.number("bits", it->default_bits, what);
  if (!it->any_bits && std::find(it->bits.begin(), it->bits.end(), bits) == it->bits.end()) {
    std::string allowed;
    for (double b : it->bits) allowed += (allowed.empty() ? "" : ", ") + fmt::format("{}", b);
    user_error("{}: {} has no {}-bit variant (bits: {})", what, spec.method, bits, allowed);
  }
  if (ctx.head_dim < 8 || ctx.head_dim > 1024)
    user_error("{}: head dimension {} is not supported (8..1024)", what, ctx.head_dim);
  return it->make(Args{spec, side, ctx, bits, what});
}

}  // namespace qt::kv
