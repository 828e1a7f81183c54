// The quantized KV cache: per layer and side (keys, values) a codec from the method table, a
// full-precision window of the newest tokens, and attention that reads the codes (codec.h).
//
// What a query sees. After n tokens were appended to a layer, side s holds positions
// [0, boundary(n)) encoded and [boundary(n), n) at full precision (fp16-rounded), where
//   per-token methods:  boundary(n) = max(0, n − R)           (values in KIVI: a FIFO of R)
//   token groups of G:  boundary(n) = ⌊n / U⌋ · U, U = R or G  (KIVI keys: the residual is
//                       flushed as R/G groups when it reaches R tokens)
// A code never changes once written, so one batch can serve every query with its own n:
//   cache  — every query of a batch sees the state after the whole batch was appended
//            (llama.cpp's quantized cache: write the ubatch, then attend);
//   decode — the query at position t sees the state after t + 1 appends (token-by-token
//            generation: append the token's K/V, then attend), so `cache` with ubatch 1
//            equals `decode`.
//
// What a side stores: its codes and a ring of the newest tokens at full precision
// (token_ring.h), as many as its largest window (R per token, U in groups; every position for a
// full-precision side of a mixed recipe) — nothing else per position, so memory is what
// bytes_per_token counts, except that the ring holds its fp16-rounded values in fp32 (the
// attention loops read fp32; for KIVI's R=128 on SmolLM2, 3 MB more than fp16 would take).
// Groups are encoded when the boundary passes them, from the ring (positions before the batch)
// and the batch's own K/V. `decode` with a batch of many tokens needs more: the query at t
// reads [boundary(t + 1), t + 1) at full precision, and later appends of the same batch may
// already have encoded those positions and pushed them out of the ring. append() keeps them —
// [boundary(first + 1), end) of the layer just appended — in a buffer per side shared by all
// layers (`Recent`, sized by the batch): the model appends a layer and attends it before the
// next layer's append (libquant/model/llama.cpp; an attend the cache can no longer serve throws).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/error.h"
#include "formats/tensor.h"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/attend_kernels.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/codecs.h"
#include "libquant/kv/kv_stats.h"
#include "libquant/kv/token_ring.h"
#include "libquant/math/ops.h"

namespace qt {
namespace {

using kv::Codec;

struct SideStore {
  std::unique_ptr<Codec> codec;  // null: full precision
  bool round_f16 = true;         // the window / full-precision values are fp16
  int R = 0, G = 1;
  kv::TokenRing ring;          // the newest positions at full precision
  std::vector<uint8_t> codes;  // [kv head][groups][group_bytes]
  int64_t encoded = 0;         // positions encoded (whole groups)

  int64_t boundary(int64_t n) const {
    if (!codec) return 0;
    if (G == 1) return std::max<int64_t>(0, n - R);
    const int64_t u = R > 0 ? R : G;
    return n / u * u;
  }
  // Positions at full precision at most (n − boundary(n)): the ring's capacity.
  int64_t window_cap(int64_t max_ctx) const {
    if (!codec) return max_ctx;
    return G == 1 ? R : (R > 0 ? R : G);
  }
  double bytes_at(int64_t n, int D) const {  // one kv head, n positions
    const int64_t b = boundary(n);
    const double enc = codec ? double(b / G) * double(codec->group_bytes()) : 0.0;
    return enc + double(n - b) * D * (round_f16 ? 2.0 : 4.0);
  }
};

class QuantCache final : public KVCache {
 public:
  QuantCache(const KVShape& s, const kv::KVConfig& c) : KVCache(s), cfg_(c) {
    if (int(c.k.size()) != s.n_layers || int(c.v.size()) != s.n_layers)
      user_error("kv config: {} layers of keys and {} of values for a model of {} layers", c.k.size(), c.v.size(),
                 s.n_layers);
    kv::KVContext ctx;
    ctx.head_dim = s.head_dim;
    ctx.seed = c.seed;
    if (!c.artifacts.empty()) ctx.artifacts = kv::Artifacts::load(c.artifacts, s.head_dim, c.seed);
    // Each layer's own RoPE (gemma3: the sliding layers' local base), for codecs of pre-RoPE keys.
    std::shared_ptr<const kv::RopeAngles> rope, rope_local;
    if (int(s.rope_inv_freq.size()) * 2 == s.head_dim) rope = kv::RopeAngles::make(s.rope_inv_freq, s.max_ctx);
    if (int(s.rope_local_inv_freq.size()) * 2 == s.head_dim)
      rope_local = kv::RopeAngles::make(s.rope_local_inv_freq, s.max_ctx);
    cap_ = s.max_ctx;
    const int H = s.n_kv_heads, D = s.head_dim;
    layers_.resize(s.n_layers);
    for (int l = 0; l < s.n_layers; ++l)
      for (int side = 0; side < 2; ++side) {
        const kv::KVSpec& spec = side == 0 ? c.k[l] : c.v[l];
        SideStore& st = side == 0 ? layers_[l].k : layers_[l].v;
        if (spec.method == "bf16")  // its layout and kernel belong to the dense cache alone
          user_error(
              "--kv bf16 is a whole-cache method: keys and values of every layer (--kv bf16), not mixed with "
              "other methods");
        st.round_f16 = spec.method != "f32";
        if (!spec.full_precision()) {
          ctx.layer = l;
          ctx.rope = !s.rope_local.empty() && s.rope_local[size_t(l)] ? rope_local : rope;
          st.codec = kv::make_codec(spec, side == 0 ? kv::Side::Key : kv::Side::Value, ctx);
          st.G = st.codec->token_group();
          const double r = spec.number("r", spec.method == "kivi" && c.residual < 0 ? 128 : std::max(0, c.residual),
                                       side == 0 ? "--kv-k" : "--kv-v");
          st.R = int(r);
          if (r < 0 || r != std::floor(r)) user_error("kv: r={} is not a token count", r);
          if (st.G > 1 && st.R % st.G)
            user_error("{} {}: the residual window {} is not a multiple of the group of {} tokens",
                       side == 0 ? "--kv-k" : "--kv-v", spec.text(), st.R, st.G);
          st.codes.assign(size_t(H) * groups_cap(st) * st.codec->group_bytes(), 0);
        } else if (!spec.params.empty()) {
          user_error("{} {}: full-precision caches take no parameters", side == 0 ? "--kv-k" : "--kv-v", spec.text());
        }
        st.ring = kv::TokenRing(H, D, st.window_cap(cap_), st.round_f16);
      }
    if (c.stats) {  // the exact keys, for the score error (kv_stats.h)
      if (c.stats->n_layers() != s.n_layers) throw std::logic_error("kv stats: layer count differs from the cache's");
      for (auto& L : layers_) L.exact_k.assign(size_t(H) * cap_ * D, 0.0f);
    }
  }

  void clear() override {
    for (auto& L : layers_) {
      L.n = 0, L.k.encoded = 0, L.v.encoded = 0;
      L.k.ring.clear(), L.v.ring.clear();
    }
    for (auto& r : recent_) r.layer = -1;
  }
  int size(int layer) const override { return layers_[layer].n; }
  std::string name() const override { return cfg_.describe(); }

  double bytes_per_token() const override {
    double b = 0;
    for (auto& L : layers_)
      b += L.k.bytes_at(shape_.max_ctx, shape_.head_dim) + L.v.bytes_at(shape_.max_ctx, shape_.head_dim);
    return b * shape_.n_kv_heads / double(shape_.max_ctx);
  }

  void append(int layer, const float* k, const float* v, int n, int first_pos) override {
    Layer& L = layers_.at(layer);
    if (first_pos != L.n || first_pos + n > shape_.max_ctx)
      user_error("kv cache: append of positions {}..{} to layer {} holding {} (capacity {})", first_pos,
                 first_pos + n - 1, layer, L.n, shape_.max_ctx);
    if (!L.exact_k.empty()) {
      const int H = shape_.n_kv_heads, D = shape_.head_dim;
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h)
          token(L.k, h, first_pos + t, k, first_pos, L.exact_k.data() + (size_t(h) * cap_ + first_pos + t) * D);
    }
    for (int side = 0; side < 2; ++side) {
      SideStore& st = side == 0 ? L.k : L.v;
      const float* src = side == 0 ? k : v;
      keep_recent(recent_[side], st, layer, src, n, first_pos);
      const int64_t before = st.encoded;
      encode_upto(st, st.boundary(first_pos + n), src, first_pos);
      if (cfg_.stats) reconstruction_stats(layer, side, st, before, src, first_pos);
      st.ring.push(src, n);
    }
    L.n = first_pos + n;
  }

  void attend(int layer, const float* q, int n_q, int first_pos, float* out) const override;

 private:
  struct Layer {
    SideStore k, v;
    int n = 0;
    std::vector<float> exact_k;  // with stats: every key as the codec saw it, [kv head][cap][D]
  };

  // Stats: cos and squared errors of positions [from, st.encoded) of every kv head against what
  // was encoded (before the batch enters the ring, as encode_upto reads it).
  void reconstruction_stats(int layer, int side, const SideStore& st, int64_t from, const float* src,
                            int64_t p0) const {
    if (!st.codec || st.encoded <= from) return;
    const int H = shape_.n_kv_heads, D = shape_.head_dim;
    const size_t gb = st.codec->group_bytes();
    kv::KVLayerStats acc;
    std::vector<float> x(D), xr(D);
    for (int h = 0; h < H; ++h)
      for (int64_t p = from; p < st.encoded; ++p) {
        token(st, h, p, src, p0, x.data());
        st.codec->for_head(h).reconstruct(st.codes.data() + size_t(h) * groups_cap(st) * gb, p, xr.data());
        double e = 0, n2 = 0, r2 = 0, dot = 0;
        for (int d = 0; d < D; ++d) {
          e += double(x[d] - xr[d]) * (x[d] - xr[d]);
          n2 += double(x[d]) * x[d], r2 += double(xr[d]) * xr[d], dot += double(x[d]) * xr[d];
        }
        acc.err2[side] += e, acc.norm2[side] += n2, ++acc.vectors[side];
        acc.cos_sum[side] += n2 > 0 && r2 > 0 ? dot / std::sqrt(n2 * r2) : (n2 == 0 && r2 == 0 ? 1.0 : 0.0);
      }
    cfg_.stats->add(layer, acc);
  }

  int64_t groups_cap(const SideStore& st) const { return (cap_ + st.G - 1) / st.G; }

  // Positions of one side of the layer just appended that its queries may read at full
  // precision though the ring no longer holds them (decode, a batch longer than the window).
  struct Recent {
    int layer = -1;           // −1: none
    int64_t lo = 0, hi = 0;   // positions [lo, hi)
    std::vector<float> rows;  // [kv head][hi − lo][D], fp16-rounded as the ring's
  };

  // Called before the batch [p0, p0 + n) of `src` enters st.ring: keeps what the batch's
  // earliest query may read, [boundary(p0 + 1), p0 + n) in decode, when the ring (capacity C)
  // will not hold it after the push. In `cache` every query reads [boundary(p0 + n), p0 + n),
  // which the ring holds.
  void keep_recent(Recent& rc, const SideStore& st, int layer, const float* src, int n, int64_t p0) {
    rc.layer = -1;
    const int64_t end = p0 + n, cap = st.ring.capacity();
    const int64_t lo = cfg_.mode == kv::KVMode::Decode ? st.boundary(p0 + 1) : st.boundary(end);
    if (cap == 0 || lo >= end - cap) return;  // no window at all, or the ring holds it
    const int H = shape_.n_kv_heads, D = shape_.head_dim;
    rc.layer = layer, rc.lo = lo, rc.hi = end;
    rc.rows.resize(size_t(H) * size_t(end - lo) * D);
    for (int h = 0; h < H; ++h)
      for (int64_t p = lo; p < end; ++p)
        token(st, h, p, src, p0, rc.rows.data() + (size_t(h) * size_t(end - lo) + size_t(p - lo)) * D);
  }

  // Position p of kv head h at full precision into y: from the ring before the batch (p < p0),
  // else the batch's row rounded as the ring rounds it.
  void token(const SideStore& st, int h, int64_t p, const float* src, int64_t p0, float* y) const {
    const int D = shape_.head_dim, H = shape_.n_kv_heads;
    if (p < p0) {
      std::memcpy(y, st.ring.row(h, p), sizeof(float) * D);
      return;
    }
    const float* x = src + ((p - p0) * H + h) * D;
    for (int d = 0; d < D; ++d) y[d] = st.round_f16 ? kv::round_half(x[d]) : x[d];
  }

  // Encode positions [encoded, b) (whole groups) of every kv head from the fp16-rounded tokens
  // (the K/V a half-precision model hands its cache): the ring's before the batch, `src`'s
  // (positions p0 …) from there. Runs before the batch is pushed into the ring.
  void encode_upto(SideStore& st, int64_t b, const float* src, int64_t p0) {
    if (!st.codec || b <= st.encoded) return;
    const int H = shape_.n_kv_heads, D = shape_.head_dim;
    const size_t gb = st.codec->group_bytes();
    const int64_t g0 = st.encoded / st.G, g1 = b / st.G;
    if (st.G == 1) {  // per-token codecs: runs of up to 64 tokens per call (codecs may share work across them)
      constexpr int64_t kRun = 64;
      const int64_t runs = (g1 - g0 + kRun - 1) / kRun;
#pragma omp parallel for schedule(static) collapse(2) if ((g1 - g0) * H > 8)
      for (int h = 0; h < H; ++h)
        for (int64_t r = 0; r < runs; ++r) {
          const int64_t a = g0 + r * kRun, n = std::min(kRun, g1 - a);
          thread_local std::vector<float> x;
          x.resize(size_t(n) * D);
          for (int64_t t = 0; t < n; ++t) token(st, h, a + t, src, p0, x.data() + size_t(t) * D);
          st.codec->for_head(h).encode_tokens_at(x.data(), int(n), a,
                                                 st.codes.data() + (size_t(h) * groups_cap(st) + a) * gb);
        }
      st.encoded = g1;
      return;
    }
#pragma omp parallel for schedule(static) collapse(2) if ((g1 - g0) * H > 8)
    for (int h = 0; h < H; ++h)
      for (int64_t g = g0; g < g1; ++g) {
        thread_local std::vector<float> x;
        x.resize(size_t(st.G) * D);
        for (int t = 0; t < st.G; ++t) token(st, h, g * st.G + t, src, p0, x.data() + size_t(t) * D);
        st.codec->for_head(h).encode_at(x.data(), D, g * st.G, st.codes.data() + (size_t(h) * groups_cap(st) + g) * gb);
      }
    st.encoded = g1 * st.G;
  }

  // Calls f(rows, first, n) over positions [a, b) of kv head h at full precision, in order:
  // from the recent batch when it covers them (this layer), else from the ring.
  template <class F>
  void window_rows(const SideStore& st, const Recent& rc, int layer, int h, int64_t a, int64_t b, F&& f) const {
    if (a >= b) return;
    const int D = shape_.head_dim;
    if (rc.layer == layer && a >= rc.lo && b <= rc.hi) {
      f(rc.rows.data() + (size_t(h) * size_t(rc.hi - rc.lo) + size_t(a - rc.lo)) * D, a, int(b - a));
      return;
    }
    kv::TokenRing::Run r[2];
    const int nr = st.ring.runs(h, a, b, r);
    for (int i = 0; i < nr; ++i) f(r[i].rows, r[i].first, r[i].n);
  }

  template <class QRow>
  void score_stats(int layer, int g, int nv, QRow&& qrow, const int* nvis, const int* bk, const float* s_hat,
                   int64_t sst, float scale) const;

  kv::KVConfig cfg_;
  int64_t cap_ = 0;
  std::vector<Layer> layers_;
  Recent recent_[2];  // keys, values
};

// Stats: the scores attention computed (s_hat, rows sst apart, unscaled) against the exact keys'
// for each query v of one task: squared error over the encoded keys (j < bk[v]) and the total
// variation between the two softmaxes over every visible key.
template <class QRow>
void QuantCache::score_stats(int layer, int g, int nv, QRow&& qrow, const int* nvis, const int* bk, const float* s_hat,
                             int64_t sst, float scale) const {
  const Layer& L = layers_[layer];
  const int D = shape_.head_dim;
  kv::KVLayerStats acc;
  std::vector<double> e, p;
  for (int v = 0; v < nv; ++v) {
    const int n = nvis[v];
    const float* q = qrow(v);
    const float* sh = s_hat + size_t(v) * sst;
    e.resize(n), p.resize(n);
    double me = -1e300, mh = -1e300;
    for (int j = 0; j < n; ++j) {
      const float* kj = L.exact_k.data() + (size_t(g) * cap_ + j) * D;
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += double(q[d]) * kj[d];
      e[j] = dot;
      if (j < bk[v]) acc.score_err2 += (sh[j] - dot) * (sh[j] - dot), acc.score_ref2 += dot * dot, ++acc.scores;
      me = std::max(me, dot), mh = std::max(mh, double(sh[j]));
    }
    double se = 0, shs = 0;
    for (int j = 0; j < n; ++j) {
      e[j] = std::exp((e[j] - me) * scale), p[j] = std::exp((double(sh[j]) - mh) * scale);
      se += e[j], shs += p[j];
    }
    double tv = 0;
    for (int j = 0; j < n; ++j) tv += std::fabs(p[j] / shs - e[j] / se);
    acc.tv_sum += 0.5 * tv, ++acc.queries;
  }
  cfg_.stats->add(layer, acc);
}

// Gemma's scores for one query row of n visible keys (the last is the query's own position):
// row[j] = softmax(softcap(s · scale)) restricted to the window, 0 before it. The weights are
// normalized here, so the values' pass mixes them as they are. `sink` (gpt_oss, may be null): a
// logit that joins the denominator only (KVShape::sinks).
void masked_scores(float* row, int n, float scale, float softcap, int window, const float* sink) {
  const int lo = window > 0 ? std::max(0, n - window) : 0;
  float m = -INFINITY;
  for (int j = lo; j < n; ++j) {
    float x = row[j] * scale;
    if (softcap > 0) x = std::tanh(x / softcap) * softcap;
    row[j] = x;
    m = std::max(m, x);
  }
  if (sink) m = std::max(m, *sink);
  double sum = sink ? std::exp(double(*sink - m)) : 0.0;
  for (int j = lo; j < n; ++j) sum += (row[j] = std::exp(row[j] - m));
  const float inv = float(1.0 / sum);
  for (int j = 0; j < lo; ++j) row[j] = 0.0f;
  for (int j = lo; j < n; ++j) row[j] *= inv;
}

void QuantCache::attend(int layer, const float* q, int n_q, int first_pos, float* out) const {
  const Layer& L = layers_.at(layer);
  if (first_pos + n_q > L.n)
    user_error("kv cache: attention for positions up to {} but layer {} holds {}", first_pos + n_q - 1, layer, L.n);
  const int D = shape_.head_dim, NH = shape_.n_heads, KH = shape_.n_kv_heads, group = NH / KH;
  const float scale = shape_.scale;
  const bool decode = cfg_.mode == kv::KVMode::Decode;
  const kv::AttendKernels& K = kv::attend_kernels();
  constexpr int kRows = 64;  // query positions per task: their group·kRows queries share each decoded tile
  const int nb = (n_q + kRows - 1) / kRows;
  const int64_t tasks = int64_t(nb) * KH;
  const SideStore &SK = L.k, &SV = L.v;
  const int dtk = SK.codec ? SK.codec->domain_dim() : 0, dtv = SV.codec ? SV.codec->domain_dim() : 0;
  const int ltk0 = SK.codec ? SK.codec->table_dim() : 0;  // > 0: keys may be scored by lookup tables
  const bool masked = shape_.masked(layer);
  const float softcap = shape_.softcap;
  const int window = shape_.window_of(layer);
  const float* sinks = shape_.sinks_of(layer);  // per query head

  // 0. Several row blocks read the same encoded tiles: decode each once, for every block, when
  // the keys are scored from decoded tiles (not lookup tables). A block's tiles are then the
  // same floats it would decode itself (keys transposed to [d][kTile], zero past the last key).
  auto encoded_upto = [&](const SideStore& st) {  // what the last query row reads encoded
    const int64_t pos = first_pos + n_q - 1;
    return int(std::min<int64_t>(st.boundary(decode ? pos + 1 : first_pos + n_q), pos + 1));
  };
  const int KENC = SK.codec && nb > 1 && ltk0 == 0 ? encoded_upto(SK) : 0;
  const int VENC = SV.codec && nb > 1 ? encoded_upto(SV) : 0;
  const int ktiles = (KENC + kv::kTile - 1) / kv::kTile, vtiles = (VENC + kv::kTile - 1) / kv::kTile;
  std::vector<float> DK(size_t(KH) * ktiles * kv::kTile * dtk), DV(size_t(KH) * vtiles * kv::kTile * dtv);
  if (ktiles + vtiles > 0) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < int64_t(KH) * (ktiles + vtiles); ++t) {
      const int g = int(t % KH), i = int(t / KH);
      thread_local std::vector<float> TILE;
      if (i < ktiles) {
        const int j0 = i * kv::kTile, nj = std::min(kv::kTile, KENC - j0);
        TILE.resize(size_t(kv::kTile) * dtk);
        SK.codec->for_head(g).decode(SK.codes.data() + size_t(g) * groups_cap(SK) * SK.codec->group_bytes(), j0, nj,
                                     TILE.data());
        float* TT = DK.data() + (size_t(g) * ktiles + i) * kv::kTile * dtk;
        for (int j = 0; j < nj; ++j)
          for (int d = 0; d < dtk; ++d) TT[size_t(d) * kv::kTile + j] = TILE[size_t(j) * dtk + d];
      } else {
        const int j0 = (i - ktiles) * kv::kTile, nj = std::min(kv::kTile, VENC - j0);
        SV.codec->for_head(g).decode(SV.codes.data() + size_t(g) * groups_cap(SV) * SV.codec->group_bytes(), j0, nj,
                                     DV.data() + (size_t(g) * vtiles * kv::kTile + j0) * dtv);
      }
    }
  }

#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int b = nb - 1 - int(t / KH), g = int(t % KH);
    const int i0 = b * kRows, nr = std::min(kRows, n_q - i0);
    const int nv = nr * group;  // query vectors: row-major over (row, head in group)
    const int nk = first_pos + i0 + nr;
    const int64_t sst = (nk + kv::kTile - 1) / kv::kTile * kv::kTile;

    thread_local std::vector<float> S, QH, QT, ACC, TILE, TT;
    thread_local std::vector<int> NVIS, BK, BV;
    S.resize(size_t(nv) * sst);
    NVIS.resize(nv), BK.resize(nv), BV.resize(nv);
    int kenc = 0, venc = 0;
    for (int r = 0; r < nr; ++r) {
      const int pos = first_pos + i0 + r;
      const int64_t state = decode ? pos + 1 : first_pos + n_q;
      const int nvis = pos + 1;
      const int bk = int(std::min<int64_t>(SK.boundary(state), nvis)),
                bv = int(std::min<int64_t>(SV.boundary(state), nvis));
      for (int hh = 0; hh < group; ++hh) {
        const int v = r * group + hh;
        NVIS[v] = nvis, BK[v] = bk, BV[v] = bv;
      }
      kenc = std::max(kenc, bk), venc = std::max(venc, bv);
    }
    const int ltk = ltk0 > 0 && kenc >= SK.codec->table_min_keys() ? ltk0 : 0;  // tables, when they pay
    const Codec* CK = SK.codec ? &SK.codec->for_head(g) : nullptr;              // this kv head's codecs
    const Codec* CV = SV.codec ? &SV.codec->for_head(g) : nullptr;
    auto qrow = [&](int v) { return q + int64_t(i0 + v / group) * NH * D + int64_t(g * group + v % group) * D; };
    auto orow = [&](int v) { return out + int64_t(i0 + v / group) * NH * D + int64_t(g * group + v % group) * D; };

    // 1. scores from the codes: queries into the key domain once, 32 decoded keys at a time
    if (kenc > 0) {
      QT.resize(size_t(nv) * dtk);
      TILE.resize(size_t(kv::kTile) * dtk);
      TT.assign(size_t(kv::kTile) * dtk, 0.0f);
      QH.resize(size_t(nv) * D);
      for (int v = 0; v < nv; ++v) std::memcpy(QH.data() + size_t(v) * D, qrow(v), sizeof(float) * D);
      CK->queries_to_domain(QH.data(), nv, QT.data());
      const uint8_t* codes = SK.codes.data() + size_t(g) * groups_cap(SK) * SK.codec->group_bytes();
      float s[kv::kTile], s2[kv::kTile];
      if (ltk > 0) {  // lookup tables: one per query, then a table read per code, no decoded tile
        TILE.resize(size_t(ltk));
        for (int v = 0; v < nv; ++v)
          if (BK[v] > 0) {
            CK->query_table(QT.data() + size_t(v) * dtk, TILE.data());
            CK->score_codes(TILE.data(), codes, 0, BK[v], S.data() + size_t(v) * sst);
          }
      }
      for (int j0 = 0; ltk == 0 && j0 < kenc; j0 += kv::kTile) {
        const int nj = std::min(kv::kTile, kenc - j0);
        const float* tt = TT.data();
        if (kenc <= KENC) {  // decoded above
          tt = DK.data() + (size_t(g) * ktiles + j0 / kv::kTile) * kv::kTile * dtk;
        } else {
          CK->decode(codes, j0, nj, TILE.data());
          if (nj < kv::kTile) std::fill(TT.begin(), TT.end(), 0.0f);
          for (int j = 0; j < nj; ++j)
            for (int d = 0; d < dtk; ++d) TT[size_t(d) * kv::kTile + j] = TILE[size_t(j) * dtk + d];
        }
        // A whole tile's scores go straight into S (sst is whole tiles): those at or past BK[v]
        // are overwritten by the window's (step 2) or never read (past NVIS[v]).
        auto row = [&](int v) { return BK[v] > j0 ? S.data() + size_t(v) * sst + j0 : s; };
        int v = 0;
        for (; v + 2 <= nv; v += 2) {  // pairs of queries share each tile row's loads
          if (BK[v] <= j0 && BK[v + 1] <= j0) continue;
          K.score_tile2(QT.data() + size_t(v) * dtk, QT.data() + size_t(v + 1) * dtk, tt, dtk, row(v),
                        BK[v + 1] > j0 ? row(v + 1) : s2);
        }
        if (v < nv && BK[v] > j0) K.score_tile(QT.data() + size_t(v) * dtk, tt, dtk, row(v));
      }
    }
    // 2. scores against the full-precision window
    for (int v = 0; v < nv; ++v)
      window_rows(SK, recent_[0], layer, g, BK[v], NVIS[v], [&](const float* rows, int64_t first, int n) {
        K.dot_rows(qrow(v), rows, D, n, D, S.data() + size_t(v) * sst + first);
      });
    if (cfg_.stats) score_stats(layer, g, nv, qrow, NVIS.data(), BK.data(), S.data(), sst, scale);
    // 3. softmax over the visible keys
    std::vector<float> inv(nv);
    for (int v = 0; v < nv; ++v) {
      float* row = S.data() + size_t(v) * sst;
      const int n = NVIS[v];
      if (masked) {  // Gemma: soft-capped scores; keys before the window get weight 0
        masked_scores(row, n, scale, softcap, window, sinks ? sinks + g * group + v % group : nullptr);
        continue;
      }
      float m = row[0];
      for (int j = 1; j < n; ++j) m = std::max(m, row[j]);
      for (int j = 0; j < n; ++j) row[j] = (row[j] - m) * scale;
      ops::exp_inplace(row, n);
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += row[j];
      inv[v] = float(1.0 / sum);
    }
    if (masked)
      for (int v = 0; v < nv; ++v) inv[v] = 1.0f;  // masked_scores normalized the row
    // 4. values: mixed in the value domain tile by tile, mapped back once per query
    for (int v = 0; v < nv; ++v) std::fill(orow(v), orow(v) + D, 0.0f);
    if (venc > 0) {
      ACC.assign(size_t(nv) * dtv, 0.0f);
      TILE.resize(size_t(kv::kTile) * dtv);
      const uint8_t* codes = SV.codes.data() + size_t(g) * groups_cap(SV) * SV.codec->group_bytes();
      for (int j0 = 0; j0 < venc; j0 += kv::kTile) {
        const int nj = std::min(kv::kTile, venc - j0);
        const float* tile = TILE.data();
        if (venc <= VENC)  // decoded above
          tile = DV.data() + (size_t(g) * vtiles * kv::kTile + j0) * dtv;
        else
          CV->decode(codes, j0, nj, TILE.data());
        for (int v = 0; v < nv; ++v) {
          const int n = std::min(nj, BV[v] - j0);
          if (n > 0) K.mix_rows(S.data() + size_t(v) * sst + j0, tile, dtv, n, dtv, ACC.data() + size_t(v) * dtv);
        }
      }
      for (int v = 0; v < nv; ++v) CV->domain_to_head(ACC.data() + size_t(v) * dtv, orow(v));
    }
    for (int v = 0; v < nv; ++v) {
      // in position order: runs split at the ring's wrap add in the same order as one run
      window_rows(SV, recent_[1], layer, g, BV[v], NVIS[v], [&](const float* rows, int64_t first, int n) {
        K.mix_rows(S.data() + size_t(v) * sst + first, rows, D, n, D, orow(v));
      });
      float* o = orow(v);
      for (int d = 0; d < D; ++d) o[d] *= inv[v];
    }
  }
}

}  // namespace

std::unique_ptr<KVCache> make_quant_kv_cache(const KVShape& shape, const kv::KVConfig& config) {
  return std::make_unique<QuantCache>(shape, config);
}

}  // namespace qt
