#include "calib/sequential.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>

#include "calib/packed_spill.h"
#include "formats/error.h"
#include "libquant/model/llama.h"

// BLAS (OpenBLAS), the Fortran interface: trailing arguments are the character lengths.
extern "C" void ssyrk_(const char* uplo, const char* trans, const int* n, const int* k, const float* alpha,
                       const float* a, const int* lda, const float* beta, float* c, const int* ldc, size_t uplo_len,
                       size_t trans_len);

namespace qt::calib {

namespace {

const char* const kProjections[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                    "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                    "mlp.down_proj.weight"};

// Projections that read the same input share one Hessian: q/k/v, gate/up.
std::string site_of(const std::string& proj) {
  if (proj.rfind("self_attn.", 0) == 0 && proj != "self_attn.o_proj.weight") return "attn_in";
  if (proj == "mlp.gate_proj.weight" || proj == "mlp.up_proj.weight") return "mlp_in";
  return proj;
}

// A block projection whose weights are not loaded: the model is built with these, and each block
// gets its dense fp32 projections only while the pass is in it (an 8B model in fp32 is 30 GB).
class Unloaded final : public Linear {
 public:
  Unloaded(int64_t out, int64_t in) : out_(out), in_(in) {}
  void forward(const float*, int64_t, float*) const override {
    throw std::logic_error("sequential calibration: a block ran before its weights were loaded");
  }
  int64_t in_features() const override { return in_; }
  int64_t out_features() const override { return out_; }
  size_t weight_bytes() const override { return 0; }
  std::string kind() const override { return "unloaded"; }

 private:
  int64_t out_, in_;
};

// H += xᵀx (x: [n, in] row-major) through BLAS ssyrk, which fills one triangle: H's row-major
// lower one (column-major upper). symmetrize() copies it over once the chunks are summed.
void accumulate(std::vector<float>& H, const float* x, int64_t n, int64_t in) {
  if (H.empty()) H.assign(size_t(in * in), 0.0f);
  const int ni = int(in), k = int(n);
  const float one = 1.0f;
  ssyrk_("U", "N", &ni, &k, &one, x, &ni, &one, H.data(), &ni, 1, 1);
}

void symmetrize(std::vector<float>& H, int64_t in) {
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = i + 1; j < in; ++j) H[size_t(i * in + j)] = H[size_t(j * in + i)];
}

}  // namespace

std::map<std::string, PackedTensor> quantize_sequential(const Checkpoint& ck, const std::set<std::string>& targets,
                                                        const std::vector<int32_t>& tokens,
                                                        const SequentialOptions& opt,
                                                        const HessianQuantizer& quantize) {
  std::map<std::string, PackedTensor> out;
  PackedSpill spill;
  // The packed weight goes to the spill; its dequantized values come back when a block's forward
  // still needs them (not for the output head).
  run_sequential(ck, targets, tokens, opt,
                 [&](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols,
                     std::vector<float>& Hs, const std::string& site, bool need) {
                   PackedTensor p = spill.keep(quantize(name, w, rows, cols, Hs, site));
                   std::vector<float> d = need ? dequantize_weights(p, name) : std::vector<float>();
                   out.emplace(name, std::move(p));
                   return d;
                 });
  return out;
}

void run_sequential(const Checkpoint& ck, const std::set<std::string>& targets, const std::vector<int32_t>& tokens,
                    const SequentialOptions& opt, const HessianRounder& round) {
  const ModelConfig& c = ck.config;
  const bool tied = c.tie_word_embeddings || !ck.has("lm_head.weight");
  const std::string head = tied ? "model.embed_tokens.weight" : "lm_head.weight";
  for (const std::string& t : targets) {
    bool ok = t == head;
    for (int l = 0; l < c.n_layers && !ok; ++l)
      for (const char* p : kProjections) ok |= t == "model.layers." + std::to_string(l) + "." + p;
    if (!ok) user_error("{}: not a projection of a block or the output head (calibration sees no input for it)", t);
  }
  const int n = int(std::min<int64_t>(opt.chunks, int64_t(tokens.size()) / opt.ctx));
  if (n <= 0) user_error("calibration: the text has fewer than {} tokens, one chunk", opt.ctx);
  const int64_t H = c.hidden, T = int64_t(n) * opt.ctx;

  // Projections and the output head start unloaded (the head is never run: only its input is
  // needed); load(l) gives block l its source weights in fp32, unload(l) lets them go again.
  const LinearFactory dense = dense_linear_factory(Compute::F32);
  LlamaModel model(ck, [&](const std::string& name, const Tensor& w, const Tensor* b) -> std::unique_ptr<Linear> {
    if (name.rfind("model.layers.", 0) == 0 || name == "lm_head.weight") {
      if (!is_float(w.dtype) || w.shape.size() != 2)
        user_error("{}: calibration needs float weights, not {}", name, dtype_name(w.dtype));
      return std::make_unique<Unloaded>(w.shape[0], w.shape[1]);
    }
    return dense(name, w, b);
  });
  auto bias_of = [&](const std::string& name) {
    const std::string bias_name = name.substr(0, name.size() - 6) + "bias";
    return ck.has(bias_name) ? to_f32(ck.get(bias_name)) : std::vector<float>();
  };
  auto load = [&](int l) {
    for (const char* p : kProjections) {
      const std::string name = "model.layers." + std::to_string(l) + "." + p;
      const std::vector<float> b = bias_of(name);
      model.set_linear(l, p, make_dense_linear(ck.get(name), b.empty() ? nullptr : b.data(), Compute::F32));
    }
  };
  auto unload = [&](int l) {
    for (const char* p : kProjections) {
      const Tensor& w = ck.get("model.layers." + std::to_string(l) + "." + p);
      model.set_linear(l, p, std::make_unique<Unloaded>(w.shape[0], w.shape[1]));
      release_pages(w);  // the source's pages of this block are not read again
    }
  };
  std::vector<float> X(size_t(T * H)), tmp(size_t(int64_t(opt.ctx) * H));
  std::vector<int32_t> chunk(size_t(opt.ctx));
  for (int ci = 0; ci < n; ++ci) {
    std::copy(tokens.begin() + int64_t(ci) * opt.ctx, tokens.begin() + int64_t(ci + 1) * opt.ctx, chunk.begin());
    if (opt.bos_id >= 0) chunk[0] = opt.bos_id;
    model.embed_tokens(chunk.data(), opt.ctx, X.data() + int64_t(ci) * opt.ctx * H);
  }
  const bool tty = isatty(2);
  const auto t0 = std::chrono::steady_clock::now();
  auto quantize_one = [&](const std::string& name, std::vector<float>& Hs, const std::string& site, bool deq) {
    const Tensor& w = ck.get(name);
    return round(name, to_f32(w), w.shape[0], w.shape[1], Hs, site, deq);
  };
  double t_fwd = 0, t_q = 0;
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    std::map<std::string, std::vector<float>> hess;  // by site
    load(l);
    bool any = false;
    for (const char* p : kProjections) any |= targets.count(prefix + p) > 0;
    if (any) {
      model.set_observer([&](const std::string& name, const float* x, int64_t nt, int64_t in) {
        const std::string proj = name.substr(prefix.size());
        if (proj == "self_attn.k_proj.weight" || proj == "self_attn.v_proj.weight" || proj == "mlp.up_proj.weight")
          return;  // the same input as q_proj / gate_proj
        accumulate(hess[site_of(proj)], x, nt, in);
      });
      auto ta = now();
      for (int ci = 0; ci < n; ++ci) {  // inputs from the quantized blocks before; X unchanged
        std::copy_n(X.data() + int64_t(ci) * opt.ctx * H, opt.ctx * H, tmp.data());
        auto cache = model.make_cache(opt.ctx);
        model.forward_layer(l, tmp.data(), opt.ctx, 0, *cache);
      }
      model.set_observer(nullptr);
      for (auto& [site, Hs] : hess) symmetrize(Hs, int64_t(std::sqrt(double(Hs.size()))));
      for (const char* p : kProjections)  // the source weights of the targets are not run again
        if (targets.count(prefix + p)) {
          const Tensor& w = ck.get(prefix + p);
          model.set_linear(l, p, std::make_unique<Unloaded>(w.shape[0], w.shape[1]));
        }
      auto tb = now();
      t_fwd += secs(ta, tb);
      for (const char* p : kProjections) {
        const std::string name = prefix + p;
        if (!targets.count(name)) continue;
        const std::vector<float> deq = quantize_one(name, hess.at(site_of(p)), prefix + site_of(p), true);
        const Tensor& w = ck.get(name);
        const std::vector<float> b = bias_of(name);
        model.set_linear(
            l, p, make_dense_linear(deq.data(), w.shape[0], w.shape[1], b.empty() ? nullptr : b.data(), Compute::F32));
      }
      t_q += secs(tb, now());
    }
    auto tc = now();
    for (int ci = 0; ci < n; ++ci) {  // the next block's inputs, through the quantized block
      auto cache = model.make_cache(opt.ctx);
      model.forward_layer(l, X.data() + int64_t(ci) * opt.ctx * H, opt.ctx, 0, *cache);
    }
    t_fwd += secs(tc, now());
    unload(l);
    if (tty) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\rgptq: block %d/%d, %.0f s (forward %.0f s, quantize %.0f s)", l + 1, c.n_layers, s, t_fwd,
                   t_q);
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  if (targets.count(head)) {
    std::vector<float> Hh;
    for (int ci = 0; ci < n; ++ci) {
      model.final_norm(X.data() + int64_t(ci) * opt.ctx * H, opt.ctx, tmp.data());
      accumulate(Hh, tmp.data(), opt.ctx, H);
    }
    symmetrize(Hh, H);
    quantize_one(head, Hh, "head_in", false);
  }
}

}  // namespace qt::calib
