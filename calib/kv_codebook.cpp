#include "calib/kv_codebook.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include <Eigen/Dense>
#include <nlohmann/json.hpp>

#include "calib/kmeans.h"
#include "calib/lloyd_max_empirical.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/codecs.h"

namespace qt::calib {
namespace {

// A full-precision cache that also keeps every appended key and value, fp16-rounded.
class KvRecorder final : public KVCache {
 public:
  KvRecorder(const KVShape& s, KvSamples& out) : KVCache(s), inner_(make_f32_kv_cache(s)), out_(out) {}
  void clear() override { inner_->clear(); }
  void append(int layer, const float* k, const float* v, int n, int first_pos) override {
    inner_->append(layer, k, v, n, first_pos);
    const int H = shape_.n_kv_heads, D = shape_.head_dim;
    for (int h = 0; h < H; ++h) {
      auto& K = out_.k[size_t(layer) * H + h];
      auto& V = out_.v[size_t(layer) * H + h];
      for (int t = 0; t < n; ++t)
        for (int d = 0; d < D; ++d) {
          K.push_back(kv::round_half(k[(size_t(t) * H + h) * D + d]));
          V.push_back(kv::round_half(v[(size_t(t) * H + h) * D + d]));
        }
    }
  }
  void attend(int layer, const float* q, int n_q, int first_pos, float* out) const override {
    inner_->attend(layer, q, n_q, first_pos, out);
  }
  std::string name() const override { return inner_->name(); }
  double bytes_per_token() const override { return inner_->bytes_per_token(); }
  int size(int layer) const override { return inner_->size(layer); }

 private:
  std::unique_ptr<KVCache> inner_;
  KvSamples& out_;
};

uint64_t mix(uint64_t s, uint64_t v) { return (s ^ (v + 0x632BE59BD9B4E019ull)) * 0x9E3779B97F4A7C15ull + 1; }

constexpr int kCentroids = 256;

// vecinfer: λ and the transform (keys), then k-means per sub-space.
void train_vecinfer(const KvSamples& s, int bits, uint64_t seed, int sides, NamedFloats& out, KvCodebookReport* rep,
                    const std::function<void(int, int)>& progress) {
  const int d = s.dim, v = 8 / bits, m = d / v;
  const std::string prefix = kv::calibrated_prefix("vecinfer", bits);
  if (d % v) user_error("--kv vecinfer:bits={}: head dimension {} is not a multiple of {}", bits, d, v);
  if (s.n < kCentroids)
    user_error("--kv vecinfer: {} calibration tokens, fewer than its {} centroids; give more --chunks", s.n,
               kCentroids);
  struct Task {
    int layer, head, side, sub;
  };
  std::vector<Task> tasks;
  for (int side = 0; side < 2; ++side)
    if (sides & (1 << side))
      for (int l = 0; l < s.layers; ++l)
        for (int h = 0; h < s.heads; ++h)
          for (int sub = 0; sub < m; ++sub) tasks.push_back({l, h, side, sub});
  // transformed samples per (side, layer, head) and the keys' λ
  const size_t LH = size_t(s.layers) * s.heads;
  std::vector<std::vector<float>> X(2 * LH), lambda(LH);
  for (size_t lh = 0; lh < LH; ++lh) {
    const std::vector<float>& K = s.k[lh];
    std::vector<float>& lam = lambda[lh];
    lam.assign(size_t(d), 0.0f);
    for (int64_t t = 0; t < s.n; ++t)
      for (int i = 0; i < d; ++i) lam[size_t(i)] = std::max(lam[size_t(i)], std::abs(K[size_t(t) * d + i]));
    for (float& x : lam) x = std::sqrt(std::max(x, 1e-6f));
    std::vector<float>& Y = X[lh];
    Y.resize(K.size());
    const float inv = 1.0f / std::sqrt(float(d));
    for (int64_t t = 0; t < s.n; ++t) {
      float* y = Y.data() + size_t(t) * d;
      for (int i = 0; i < d; ++i) y[i] = K[size_t(t) * d + i] / lam[size_t(i)];
      kv::fwht(y, d);
      for (int i = 0; i < d; ++i) y[i] *= inv;
    }
    X[LH + lh] = s.v[lh];
  }
  std::map<std::tuple<int, int, int, int>, size_t> index;  // (side, layer, head, sub) → task
  for (size_t ti = 0; ti < tasks.size(); ++ti)
    index[{tasks[ti].side, tasks[ti].layer, tasks[ti].head, tasks[ti].sub}] = ti;
  std::vector<std::vector<float>> cb(tasks.size());
  std::vector<double> inertia(tasks.size());
  int done = 0;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    const Task& t = tasks[ti];
    const std::vector<float>& Y = X[size_t(t.side) * LH + size_t(t.layer) * s.heads + t.head];
    std::vector<float> sub(size_t(s.n) * v);
    for (int64_t i = 0; i < s.n; ++i)
      std::copy(Y.begin() + i * d + t.sub * v, Y.begin() + i * d + (t.sub + 1) * v, sub.begin() + i * v);
    const uint64_t sd =
        mix(mix(mix(mix(seed, uint64_t(t.layer)), uint64_t(t.side)), uint64_t(t.head)), uint64_t(t.sub));
    KMeansResult r = kmeans(sub.data(), s.n, v, kCentroids, sd);
    cb[ti] = std::move(r.centroids);
    inertia[ti] = r.inertia;
#pragma omp critical
    if (progress) progress(++done, int(tasks.size()));
  }
  double se[2] = {0, 0}, ss[2] = {0, 0};
  for (size_t ti = 0; ti < tasks.size(); ++ti) se[tasks[ti].side] += inertia[ti];
  for (int side = 0; side < 2; ++side)
    for (size_t lh = 0; lh < LH; ++lh)
      for (float x : X[size_t(side) * LH + lh]) ss[side] += double(x) * x;
  // tensors in a fixed order: per layer, side, head
  for (int l = 0; l < s.layers; ++l)
    for (int side = 0; side < 2; ++side)
      for (int h = 0; h < s.heads && (sides & (1 << side)); ++h) {
        const kv::Side sd = side == 0 ? kv::Side::Key : kv::Side::Value;
        out.emplace_back(kv::calibrated_name(prefix, l, sd, h, "present"), std::vector<float>{1.0f});
        if (side == 0)
          out.emplace_back(kv::calibrated_name(prefix, l, sd, h, "lambda"), lambda[size_t(l) * s.heads + h]);
        std::vector<float> all;
        for (int sub = 0; sub < m; ++sub) {
          const size_t ti = index.at({side, l, h, sub});
          all.insert(all.end(), cb[ti].begin(), cb[ti].end());
        }
        out.emplace_back(kv::calibrated_name(prefix, l, sd, h, "codebooks"), std::move(all));
      }
  if (rep)
    for (int side = 0; side < 2; ++side)
      if (sides & (1 << side))
        rep->lines.push_back(
            fmt::format("vecinfer:bits={} {}: {} sub-spaces of {} dims x {} centroids per layer and head; "
                        "relative MSE on the calibration vectors (transformed domain) {:.4f}",
                        bits, side == 0 ? "keys  " : "values", m, v, kCentroids, se[side] / std::max(ss[side], 1e-30)));
}

}  // namespace

void commvq_project(float* C, const int64_t* counts, int k, int d) {
  const int h = d / 2;
  for (int g = 0; g + 1 < k; g += 2) {
    double w0 = double(counts[g]), w1 = double(counts[g + 1]);
    if (w0 + w1 <= 0) w0 = w1 = 1;
    float* c0 = C + size_t(g) * d;
    float* c1 = c0 + d;
    for (int i = 0; i < h; ++i) {
      // Jᵀ(a, b) = (b, −a); J(a, b) = (−b, a) on the plane (i, i + h)
      const double ua = (w0 * c0[i] + w1 * c1[i + h]) / (w0 + w1);
      const double ub = (w0 * c0[i + h] - w1 * c1[i]) / (w0 + w1);
      c0[i] = float(ua), c0[i + h] = float(ub);
      c1[i] = -float(ub), c1[i + h] = float(ua);
    }
  }
}

namespace {

void train_commvq(const KvSamples& s, double bits, int cb, bool comm, int iters, uint64_t seed, NamedFloats& out,
                  KvCodebookReport* rep, const std::function<void(int, int)>& progress) {
  const int d = s.dim, k = 1 << cb;
  const int n = int(std::lround(bits * d / cb));
  const std::string prefix = kv::calibrated_prefix(kv::commvq_table_method(cb, comm), bits);
  if (int(s.rope_inv_freq.size()) * 2 != d) user_error("--kv commvq: the model's RoPE is unknown");
  if (s.n < k)
    user_error("--kv commvq: {} calibration tokens, fewer than its {} codewords; give more --chunks", s.n, k);
  const int ctx = s.ctx > 0 ? s.ctx : int(s.n);
  const auto rope = kv::RopeAngles::make(s.rope_inv_freq, ctx);
  const auto rope_local = s.rope_local.empty() ? rope : kv::RopeAngles::make(s.rope_local_inv_freq, ctx);
  const size_t LH = size_t(s.layers) * s.heads;
  std::vector<std::vector<float>> cbs(LH);
  std::vector<double> err(LH), norm(LH);
  int done = 0;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t lh = 0; lh < LH; ++lh) {
    const int l = int(lh / s.heads), h = int(lh % s.heads);
    const std::vector<float>& K = s.k[lh];
    std::vector<float> R(K.size());  // the pre-RoPE keys, then their residuals
    const auto& lrope = !s.rope_local.empty() && s.rope_local[size_t(l)] ? rope_local : rope;
    for (int64_t t = 0; t < s.n; ++t) lrope->rotate(K.data() + size_t(t) * d, t % ctx, R.data() + size_t(t) * d, true);
    for (float x : R) norm[lh] += double(x) * x;
    std::vector<float>& all = cbs[lh];
    all.reserve(size_t(n) * k * d);
    for (int st = 0; st < n; ++st) {
      const uint64_t sd = mix(mix(mix(mix(seed, uint64_t(l)), 0), uint64_t(h)), uint64_t(st));
      KMeansResult r =
          kmeans(R.data(), s.n, d, k, sd, iters,
                 comm ? CentreProjection([&](float* c, const int64_t* cnt) { commvq_project(c, cnt, k, d); })
                      : CentreProjection());
      for (int64_t t = 0; t < s.n; ++t) {
        const float* c = r.centroids.data() + size_t(r.assign[size_t(t)]) * d;
        float* x = R.data() + size_t(t) * d;
        for (int i = 0; i < d; ++i) x[i] -= c[i];
      }
      all.insert(all.end(), r.centroids.begin(), r.centroids.end());
    }
    for (float x : R) err[lh] += double(x) * x;
#pragma omp critical
    if (progress) progress(++done, int(LH));
  }
  for (int l = 0; l < s.layers; ++l)
    for (int h = 0; h < s.heads; ++h) {
      out.emplace_back(kv::calibrated_name(prefix, l, kv::Side::Key, h, "present"), std::vector<float>{1.0f});
      out.emplace_back(kv::calibrated_name(prefix, l, kv::Side::Key, h, "codebooks"), cbs[size_t(l) * s.heads + h]);
    }
  if (rep) {
    double e = 0, t = 0;
    for (size_t lh = 0; lh < LH; ++lh) e += err[lh], t += norm[lh];
    rep->lines.push_back(
        fmt::format("commvq:bits={} keys  : {} residual stages of {} codewords ({}-bit codes{}) per layer and head, "
                    "{} Lloyd iterations at most; relative MSE on the calibration keys (pre-RoPE, as trained) {:.4f}",
                    bits, n, k, cb, comm ? ", RoPE-commuting pairs" : ", unprojected", iters, e / std::max(t, 1e-30)));
  }
}

// Gaussian Lloyd-Max MSE at b bits (unit variance; Max 1960, b ≥ 5 from the 4^−b asymptote):
// what greedy allocation trades.
double gaussian_mse(int b) {
  static const double t[] = {1.0, 0.3634, 0.1175, 0.03454, 0.009497, 0.002499, 0.0006436, 0.0001634, 0.00004118};
  return t[b];
}

// ≈ the attention share of the sink (about half in SmolLM2's middle layers) squared, times the
// 512 positions of a chunk: its weight in the output error Σ_j p_j e_j relative to one ordinary
// position's (2 chunks of wiki.test, 3-bit values alone: PPL 36.7 unweighted, 22.6 with 128; an
// fp16 cache 21.4, turboquant_mse-3 values 22.2).
constexpr double kSinkWeight = 128.0;

void train_spectral(const KvSamples& s, double bits, int sides, NamedFloats& out, KvCodebookReport* rep,
                    const std::function<void(int, int)>& progress) {
  const int d = s.dim;
  const std::string prefix = kv::calibrated_prefix("spectral", bits);
  const int budget = int(std::lround(bits * d));
  const size_t LH = size_t(s.layers) * s.heads;
  struct Result {
    std::vector<float> rot, mean, scale, bitw;
    std::map<int, kv::Codebook> cbs;
    double mse = 0, var = 0;  // squared error (standardized-coordinate model) and variance, for the report
    int ds = 0;
    double ev = 0;
  };
  std::vector<Result> res(2 * LH);
  int done = 0;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t task = 0; task < 2 * LH; ++task) {
    const bool key = task < LH;
    if (!(sides & (key ? 1 : 2))) continue;
    const std::vector<float>& X = key ? s.k[task] : s.v[task - LH];
    Result& r = res[task];
    // The first position of every sequence (the attention sink most queries attend to) weighs
    // kSinkWeight ordinary positions: its value error reaches nearly every output, and without
    // the weight its directions — far from the bulk's — get the fewest bits (codec_spectral.cpp).
    auto weight = [&](int64_t t) { return s.ctx > 0 && t % s.ctx == 0 ? kSinkWeight : 1.0; };
    Eigen::VectorXd mu = Eigen::VectorXd::Zero(d);
    double wsum = 0;
    for (int64_t t = 0; t < s.n; ++t) {
      const double w = weight(t);
      wsum += w;
      for (int i = 0; i < d; ++i) mu[i] += w * X[size_t(t) * d + i];
    }
    mu /= wsum;
    Eigen::MatrixXd C = Eigen::MatrixXd::Zero(d, d);
    Eigen::VectorXd x(d);
    for (int64_t t = 0; t < s.n; ++t) {
      for (int i = 0; i < d; ++i) x[i] = X[size_t(t) * d + i] - mu[i];
      C.selfadjointView<Eigen::Lower>().rankUpdate(x, weight(t));
    }
    C = C.selfadjointView<Eigen::Lower>();
    C /= wsum;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(C);
    // descending eigenvalues; each eigenvector's largest-magnitude entry positive
    std::vector<int> ord(d);
    for (int i = 0; i < d; ++i) ord[size_t(i)] = d - 1 - i;
    std::vector<double> lam(static_cast<size_t>(d));
    r.rot.resize(size_t(d) * d);
    for (int i = 0; i < d; ++i) {
      Eigen::VectorXd u = es.eigenvectors().col(ord[size_t(i)]);
      int big = 0;
      for (int j = 1; j < d; ++j)
        if (std::abs(u[j]) > std::abs(u[big])) big = j;
      if (u[big] < 0) u = -u;
      for (int j = 0; j < d; ++j) r.rot[size_t(i) * d + j] = float(u[j]);
      lam[size_t(i)] = std::max(0.0, es.eigenvalues()[ord[size_t(i)]]);
    }
    r.mean.resize(size_t(d));
    r.scale.resize(size_t(d));
    for (int i = 0; i < d; ++i) {
      r.mean[size_t(i)] = float(mu[i]);
      r.scale[size_t(i)] = float(std::sqrt(std::max({lam[size_t(i)], lam[0] * 1e-12, 1e-30})));
    }
    // greedy allocation: the next bit where λ·ΔD is largest (ties: the lower coordinate)
    std::vector<int> b(size_t(d), 0);
    for (int step = 0; step < budget; ++step) {
      int best = -1;
      double gain = -1;
      for (int i = 0; i < d; ++i)
        if (b[size_t(i)] < 8) {
          const double g = lam[size_t(i)] * (gaussian_mse(b[size_t(i)]) - gaussian_mse(b[size_t(i)] + 1));
          if (g > gain) gain = g, best = i;
        }
      if (best < 0) break;
      ++b[size_t(best)];
    }
    r.bitw.assign(b.begin(), b.end());
    // standardized coordinates of the rotated samples, pooled per bit width
    // (divided by the token's RMS r as the codec does, codec_spectral.cpp)
    std::map<int, std::vector<float>> pool;
    std::vector<float> z(static_cast<size_t>(d));
    for (int64_t t = 0; t < s.n; ++t) {
      double ss = 0;
      for (int i = 0; i < d; ++i) {
        double acc = 0;
        for (int j = 0; j < d; ++j)
          acc += double(r.rot[size_t(i) * d + j]) * (double(X[size_t(t) * d + j]) - double(r.mean[size_t(j)]));
        z[size_t(i)] = float(acc / r.scale[size_t(i)]);
        ss += double(z[size_t(i)]) * z[size_t(i)];
      }
      const float rms = kv::round_half(float(std::sqrt(ss / d)));
      if (rms == 0) continue;
      for (int i = 0; i < d; ++i)
        if (b[size_t(i)] > 0) pool[b[size_t(i)]].push_back(z[size_t(i)] / rms);
    }
    for (auto& [w, samples] : pool) r.cbs[w] = lloyd_max_empirical(std::move(samples), 1 << w);
    double tot = 0, sig = 0;
    for (int i = 0; i < d; ++i) {
      tot += lam[size_t(i)];
      r.mse += lam[size_t(i)] * (b[size_t(i)] ? r.cbs[b[size_t(i)]].mse : 1.0);
      if (b[size_t(i)] > bits) ++r.ds, sig += lam[size_t(i)];
    }
    r.var = tot;
    r.ev = tot > 0 ? sig / tot : 0;
#pragma omp critical
    if (progress) progress(++done, int(LH) * ((sides & 1) + (sides >> 1 & 1)));
  }
  for (int l = 0; l < s.layers; ++l)
    for (int side = 0; side < 2; ++side)
      for (int h = 0; h < s.heads && (sides & (1 << side)); ++h) {
        const kv::Side sd = side == 0 ? kv::Side::Key : kv::Side::Value;
        Result& r = res[size_t(side) * LH + size_t(l) * s.heads + h];
        auto name = [&](const std::string& t) { return kv::calibrated_name(prefix, l, sd, h, t); };
        out.emplace_back(name("present"), std::vector<float>{1.0f});
        out.emplace_back(name("rotation"), r.rot);
        out.emplace_back(name("mean"), r.mean);
        out.emplace_back(name("scale"), r.scale);
        out.emplace_back(name("bits"), r.bitw);
        for (auto& [w, cb] : r.cbs) {
          out.emplace_back(name(fmt::format("cb{}.centroids", w)),
                           std::vector<float>(cb.centroids.begin(), cb.centroids.end()));
          out.emplace_back(name(fmt::format("cb{}.thresholds", w)),
                           std::vector<float>(cb.thresholds.begin(), cb.thresholds.end()));
        }
      }
  if (rep)
    for (int side = 0; side < 2; ++side) {
      if (!(sides & (1 << side))) continue;
      double mse = 0, var = 0, ds = 0, ev = 0;
      int maxb = 0;
      for (size_t lh = 0; lh < LH; ++lh) {
        const Result& r = res[size_t(side) * LH + lh];
        mse += r.mse, var += r.var, ds += r.ds, ev += r.ev;
        for (float w : r.bitw) maxb = std::max(maxb, int(w));
      }
      rep->lines.push_back(fmt::format(
          "spectral:bits={} {}: signal dims (more than {} bits) {:.1f} of {} on average, "
          "explaining {:.1f}% of the variance; widest {} bits; relative MSE on the calibration vectors {:.4f}",
          bits, side == 0 ? "keys  " : "values", bits, ds / double(LH), d, 100 * ev / double(LH), maxb,
          mse / std::max(var, 1e-30)));
    }
}

}  // namespace

void check_commvq_options(const kv::KVSpec& spec, int sides) {
  for (auto& [k, v] : spec.params)
    if (k != "bits" && k != "cb" && k != "comm" && k != "iters")
      user_error("--kv {}: commvq calibration takes bits=B, cb=2|4|8, comm=0|1, iters=N (not {})", spec.text(), k);
  if (sides & 2) user_error("--kv {}: CommVQ encodes keys only (--kv-sides keys)", spec.text());
  const double bits = spec.number("bits", 2, "--kv");
  const double cbv = spec.number("cb", 8, "--kv"), comm = spec.number("comm", 1, "--kv"),
               iters = spec.number("iters", 10, "--kv");
  if (!(bits > 0 && bits <= 8))
    user_error("--kv {}: bits={} is not a rate in (0, 8] bits per element", spec.text(), bits);
  if (cbv != 2 && cbv != 4 && cbv != 8)
    user_error("--kv {}: cb={} is not a codebook width of 2, 4 or 8 bits", spec.text(), cbv);
  if (comm != 0 && comm != 1) user_error("--kv {}: comm={} is not 0 or 1", spec.text(), comm);
  if (iters < 1 || iters > 1000 || iters != std::floor(iters))
    user_error("--kv {}: iters={} is not a count in 1..1000", spec.text(), iters);
}

KvSamples collect_kv_samples(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks,
                             int32_t bos_id) {
  const int n = int(std::min<int64_t>(chunks, int64_t(tokens.size()) / ctx));
  if (n <= 0) user_error("calibrate: the text has fewer than {} tokens, one chunk", ctx);
  const KVShape shape = model.kv_shape(ctx);
  KvSamples s;
  s.layers = shape.n_layers, s.heads = shape.n_kv_heads, s.dim = shape.head_dim;
  s.k.resize(size_t(s.layers) * s.heads);
  s.v.resize(size_t(s.layers) * s.heads);
  for (auto* side : {&s.k, &s.v})
    for (auto& x : *side) x.reserve(size_t(n) * ctx * s.dim);
  KvRecorder rec(shape, s);
  std::vector<int32_t> chunk(static_cast<size_t>(ctx));
  for (int ci = 0; ci < n; ++ci) {
    rec.clear();
    std::copy(tokens.begin() + int64_t(ci) * ctx, tokens.begin() + int64_t(ci + 1) * ctx, chunk.begin());
    if (bos_id >= 0) chunk[0] = bos_id;
    model.forward_hidden(chunk.data(), ctx, 0, rec);
  }
  s.n = int64_t(n) * ctx;
  s.ctx = ctx;
  s.rope_inv_freq = shape.rope_inv_freq;
  s.rope_local_inv_freq = shape.rope_local_inv_freq;
  s.rope_local = shape.rope_local;
  return s;
}

NamedFloats train_kv_codebooks(const KvSamples& s, const kv::KVSpec& spec, uint64_t seed, int sides,
                               KvCodebookReport* report, const std::function<void(int, int)>& progress) {
  const auto allowed = kv::kv_method_bits(spec.method);  // UserError for an unknown method
  if (spec.method == "commvq") {
    check_commvq_options(spec, sides);
    const double bits = spec.number("bits", kv::kv_method_default_bits(spec.method), "--kv");
    const double cbv = spec.number("cb", 8, "--kv"), comm = spec.number("comm", 1, "--kv"),
                 iters = spec.number("iters", 10, "--kv");
    const double nd = bits * s.dim / cbv;
    if (!(bits > 0) || nd < 1 || nd > 256 || std::fabs(nd - std::round(nd)) > 1e-9)
      user_error("--kv {}: {} bits per element is not a whole number of {}-bit codes per {}-dim key", spec.text(), bits,
                 cbv, s.dim);
    NamedFloats out;
    train_commvq(s, bits, int(cbv), comm == 1, int(iters), seed, out, report, progress);
    return out;
  }
  for (auto& [k, v] : spec.params)
    if (k != "bits") user_error("--kv {}: calibration takes only bits=B (not {})", spec.text(), k);
  const double bits = spec.number("bits", kv::kv_method_default_bits(spec.method), "--kv");
  if (std::find(allowed.begin(), allowed.end(), bits) == allowed.end())
    user_error("--kv {}: {} has no {}-bit variant", spec.text(), spec.method, bits);
  NamedFloats out;
  if (spec.method == "vecinfer")
    train_vecinfer(s, int(bits), seed, sides, out, report, progress);
  else if (spec.method == "spectral")
    train_spectral(s, bits, sides, out, report, progress);
  else
    user_error("--kv {}: {} needs no calibration (calibrated methods: {})", spec.text(), spec.method,
               kv::calibrated_kv_method_names());
  return out;
}

void write_calibrated_artifacts(const std::string& dir, const std::string& prefix, const NamedFloats& tables,
                                int head_dim, uint64_t seed,
                                const std::vector<std::pair<std::string, std::string>>& info) {
  std::filesystem::create_directories(dir);
  const std::string mp = dir + "/manifest.json";
  nlohmann::ordered_json man;
  if (std::filesystem::is_regular_file(mp)) {
    MappedFile mf = map_file(mp);
    try {
      man = nlohmann::ordered_json::parse(std::string(reinterpret_cast<const char*>(mf.data), mf.size));
    } catch (const std::exception& e) {
      user_error("--out {}: manifest.json is not JSON ({})", dir, e.what());
    }
    if (man.value("format", "") != "quanttool-kv-artifacts")
      user_error("--out {}: holds a manifest.json that is not a quanttool KV artifacts manifest", dir);
    if (man.value("head_dim", 0) != head_dim || man.value("seed", uint64_t(0)) != seed)
      user_error("--out {}: artifacts for head dimension {} and seed {} already there (this model: {}, --kv-seed {})",
                 dir, man.value("head_dim", 0), man.value("seed", uint64_t(0)), head_dim, seed);
  } else {
    man["format"] = "quanttool-kv-artifacts";
    man["version"] = 1;
    man["head_dim"] = head_dim;
    man["seed"] = seed;
  }
  NamedTensors ts;
  std::vector<std::string> names;
  for (auto& [n, v] : tables) {
    ts.emplace_back(n, Tensor::from_f32(v, {int64_t(v.size())}));
    names.push_back(n);
  }
  const std::string file = prefix + ".safetensors";
  write_safetensors(dir + "/" + file, ts, {{"format", "quanttool-kv-artifacts"}});
  man["files"][file] = names;
  nlohmann::ordered_json inf;
  for (auto& [k, v] : info) inf[k] = v;
  man["calibrated"][prefix] = inf;
  const std::string t = man.dump(2) + "\n";
  write_file_atomic(mp, t.data(), t.size());
}

}  // namespace qt::calib
