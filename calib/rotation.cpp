#include "calib/rotation.h"

#include <Eigen/Dense>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "formats/error.h"

// BLAS (OpenBLAS), the Fortran interface: trailing arguments are the character lengths.
extern "C" void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
                       const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc, size_t ta_len, size_t tb_len);

namespace qt::calib {

std::vector<float> random_orthogonal(int d, uint64_t seed) {
  std::mt19937_64 g(seed);
  // Box–Muller from 53-bit uniforms: the same doubles on every platform (std::normal_distribution
  // is implementation-defined).
  auto uniform = [&] { return (double(g() >> 11) + 0.5) * 0x1.0p-53; };
  Eigen::MatrixXd G(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; j += 2) {
      const double r = std::sqrt(-2.0 * std::log(uniform())), t = 2.0 * M_PI * uniform();
      G(i, j) = r * std::cos(t);
      if (j + 1 < d) G(i, j + 1) = r * std::sin(t);
    }
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(G);
  Eigen::MatrixXd Q = qr.householderQ();
  const Eigen::MatrixXd R = qr.matrixQR().triangularView<Eigen::Upper>();
  for (int j = 0; j < d; ++j)
    if (R(j, j) < 0) Q.col(j) = -Q.col(j);
  std::vector<float> out(size_t(d) * d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) out[size_t(i) * d + j] = float(Q(i, j));
  return out;
}

namespace {

// Row-major W (rows × d) ← W·Q, Q row-major d × d: column-major, Wᵀ ← Qᵀ·Wᵀ with Q's buffer
// read as Qᵀ.
void times_q(std::vector<float>& W, int64_t rows, int d, const std::vector<float>& Q) {
  std::vector<float> out(W.size());
  const int n = int(rows);
  const float one = 1, zero = 0;
  sgemm_("N", "N", &d, &n, &d, &one, Q.data(), &d, W.data(), &d, &zero, out.data(), &d, 1, 1);
  W.swap(out);
}

// Row-major W (d × cols) ← Qᵀ·W: column-major, Wᵀ ← Wᵀ·Q.
void qt_times(std::vector<float>& W, int64_t cols, int d, const std::vector<float>& Q) {
  std::vector<float> out(W.size());
  const int c = int(cols);
  const float one = 1, zero = 0;
  sgemm_("N", "T", &c, &d, &d, &one, W.data(), &c, Q.data(), &d, &zero, out.data(), &c, 1, 1);
  W.swap(out);
}

void scale_columns(std::vector<float>& W, int64_t cols, const std::vector<float>& g) {
  for (size_t i = 0; i < W.size(); ++i) W[i] *= g[i % size_t(cols)];
}

}  // namespace

void rotate_residual(Checkpoint& ck, uint64_t seed) {
  const ModelConfig& c = ck.config;
  if (c.desc().has_post_norms())
    user_error(
        "--rotate: {} puts a norm between each block's output and the residual (post-norms); "
        "the rotation cannot be folded there",
        c.arch);
  const int d = c.hidden;
  const std::vector<float> Q = random_orthogonal(d, seed);
  auto get = [&](const std::string& name) { return to_f32(ck.get(name)); };
  auto put = [&](const std::string& name, std::vector<float> v, std::vector<int64_t> shape) {
    ck.tensors[name] = Tensor::from_f32(std::move(v), std::move(shape));
  };
  const std::vector<float> ones(size_t(d), 1.0f);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const struct {
      const char* norm;
      std::vector<const char*> readers;
    } sites[] = {{"input_layernorm", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
                 {"post_attention_layernorm", {"mlp.gate_proj", "mlp.up_proj"}}};
    for (const auto& s : sites) {
      const std::vector<float> g = get(p + s.norm + ".weight");
      for (const char* r : s.readers) {
        const std::string name = p + r + ".weight";
        const std::vector<int64_t> shape = ck.get(name).shape;
        std::vector<float> W = get(name);
        scale_columns(W, d, g);
        times_q(W, shape[0], d, Q);
        put(name, std::move(W), shape);
      }
      put(p + s.norm + ".weight", ones, {d});
    }
    for (const char* w : {"self_attn.o_proj", "mlp.down_proj"}) {
      const std::string name = p + w + ".weight";
      const std::vector<int64_t> shape = ck.get(name).shape;
      std::vector<float> W = get(name);
      qt_times(W, shape[1], d, Q);
      put(name, std::move(W), shape);
      const std::string bias = p + w + ".bias";
      if (ck.has(bias)) {
        std::vector<float> b = get(bias);
        qt_times(b, 1, d, Q);
        put(bias, std::move(b), {d});
      }
    }
  }
  const std::vector<float> gf = get("model.norm.weight");
  const std::vector<int64_t> eshape = ck.get("model.embed_tokens.weight").shape;
  std::vector<float> head = get(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  const std::vector<int64_t> hshape = c.tie_word_embeddings ? eshape : ck.get("lm_head.weight").shape;
  scale_columns(head, d, gf);
  times_q(head, hshape[0], d, Q);
  put("lm_head.weight", std::move(head), hshape);
  std::vector<float> E = get("model.embed_tokens.weight");
  times_q(E, eshape[0], d, Q);
  put("model.embed_tokens.weight", std::move(E), eshape);
  put("model.norm.weight", ones, {d});
  ck.config.tie_word_embeddings = false;
}

void rotate_heads(Checkpoint& ck, uint64_t seed) {
  const ModelConfig& c = ck.config;
  const int hd = c.head_dim;
  // Another matrix than the residual's (seed + 1): the two rotations are independent.
  const std::vector<float> R = random_orthogonal(hd, seed + 1);
  auto get = [&](const std::string& name) { return to_f32(ck.get(name)); };
  auto put = [&](const std::string& name, std::vector<float> v, std::vector<int64_t> shape) {
    ck.tensors[name] = Tensor::from_f32(std::move(v), std::move(shape));
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.self_attn.", l);
    // v_proj [n_kv·hd, d]: each head's rows W_h ← Rᵀ·W_h, so v_h ← v_h·R (its bias too).
    const std::vector<int64_t> vs = ck.get(p + "v_proj.weight").shape;
    std::vector<float> V = get(p + "v_proj.weight");
    if (vs[0] % hd != 0) user_error("--rotate: {}v_proj has {} rows, not whole heads of {}", p, vs[0], hd);
    std::vector<float> out(V.size(), 0.0f);
    for (int64_t h = 0; h < vs[0] / hd; ++h)
      for (int j = 0; j < hd; ++j)
        for (int i = 0; i < hd; ++i) {
          const float r = R[size_t(i) * hd + j];
          const float* src = V.data() + (h * hd + i) * vs[1];
          float* dst = out.data() + (h * hd + j) * vs[1];
          for (int64_t k = 0; k < vs[1]; ++k) dst[k] += r * src[k];
        }
    put(p + "v_proj.weight", std::move(out), vs);
    if (ck.has(p + "v_proj.bias")) {
      const std::vector<float> b = get(p + "v_proj.bias");
      std::vector<float> nb(b.size(), 0.0f);
      for (size_t h = 0; h < b.size() / size_t(hd); ++h)
        for (int j = 0; j < hd; ++j)
          for (int i = 0; i < hd; ++i) nb[h * hd + j] += b[h * hd + i] * R[size_t(i) * hd + j];
      put(p + "v_proj.bias", std::move(nb), {int64_t(b.size())});
    }
    // o_proj [d, n_heads·hd]: each head's columns W[:, h] ← W[:, h]·R, so o_h·R meets the original
    // product (the attention output of a head is a mix of its values: it turns with them).
    const std::vector<int64_t> os = ck.get(p + "o_proj.weight").shape;
    std::vector<float> O = get(p + "o_proj.weight");
    std::vector<float> oo(O.size(), 0.0f);
    for (int64_t r = 0; r < os[0]; ++r)
      for (int64_t h = 0; h < os[1] / hd; ++h) {
        const float* src = O.data() + r * os[1] + h * hd;
        float* dst = oo.data() + r * os[1] + h * hd;
        for (int i = 0; i < hd; ++i)
          for (int j = 0; j < hd; ++j) dst[j] += src[i] * R[size_t(i) * hd + j];
      }
    put(p + "o_proj.weight", std::move(oo), os);
  }
}

}  // namespace qt::calib
