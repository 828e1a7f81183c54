#include "calib/sequential.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>

#include "calib/packed_spill.h"
#include "formats/error.h"
#include "calib/expert_prior.h"
#include "libquant/model/block_tensors.h"
#include "libquant/model/llama.h"

// BLAS (OpenBLAS), the Fortran interface: trailing arguments are the character lengths.
extern "C" void ssyrk_(const char* uplo, const char* trans, const int* n, const int* k, const float* alpha,
                       const float* a, const int* lda, const float* beta, float* c, const int* ldc, size_t uplo_len,
                       size_t trans_len);

namespace qt::calib {

namespace {

// Projections that read the same input share one Hessian, named by the first of them: q/k/v, gate/up,
// an expert's gate/up.
std::string site_of(const ModelConfig& c, const std::string& prefix, const std::string& proj) {
  const std::string leader = shared_input_leader(c, proj);
  return prefix + (leader.empty() ? proj : leader);
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

// A sparse layer's expert Hessians (calib/expert_prior.h): the experts' gate/up inputs pooled with
// each other, their down inputs likewise. Returns how many sites had few tokens; `fewest` keeps the
// site with the fewest.
int expert_prior(const ModelConfig& c, const std::string& prefix, std::map<std::string, std::vector<float>>& hess,
                 const std::map<std::string, int64_t>& seen, std::pair<std::string, int64_t>* fewest) {
  const MoeNames& m = *c.desc().moe;
  int few = 0;
  for (const char* proj : {m.gate, m.down}) {
    std::vector<std::vector<float>*> sums;
    std::vector<int64_t> counts;
    for (int e = 0; e < c.n_experts; ++e) {
      const std::string site = prefix + m.experts + "." + std::to_string(e) + "." + proj + ".weight";
      auto it = seen.find(site);
      counts.push_back(it == seen.end() ? 0 : it->second);
      sums.push_back(&hess[site]);
      if (counts.back() < fewest->second) *fewest = {site, counts.back()};
    }
    few += add_expert_prior(sums, counts);
  }
  return few;
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
  std::vector<std::vector<std::string>> projections(static_cast<size_t>(c.n_layers));
  std::set<std::string> all;  // every block projection by full name: built unloaded
  for (int l = 0; l < c.n_layers; ++l) {
    projections[size_t(l)] = block_projections(c, l);
    for (const std::string& p : projections[size_t(l)]) all.insert("model.layers." + std::to_string(l) + "." + p);
  }
  for (const std::string& t : targets)
    if (t != head && !all.count(t))
      user_error("{}: not a projection of a block or the output head (calibration sees no input for it)", t);
  const int n = int(std::min<int64_t>(opt.chunks, int64_t(tokens.size()) / opt.ctx));
  if (n <= 0) user_error("calibration: the text has fewer than {} tokens, one chunk", opt.ctx);
  const int64_t H = c.hidden, T = int64_t(n) * opt.ctx;

  // Projections and the output head start unloaded (the head is never run: only its input is
  // needed); load(l) gives block l its source weights in fp32, unload(l) lets them go again.
  const LinearFactory dense = dense_linear_factory(Compute::F32);
  LlamaModel model(ck, [&](const std::string& name, const Tensor& w, const Tensor* b) -> std::unique_ptr<Linear> {
    if (all.count(name) || name == "lm_head.weight") {  // a router stays loaded: it is no target
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
    for (const std::string& p : projections[size_t(l)]) {
      const std::string name = "model.layers." + std::to_string(l) + "." + p;
      const std::vector<float> b = bias_of(name);
      model.set_linear(l, p, make_dense_linear(ck.get(name), b.empty() ? nullptr : b.data(), Compute::F32));
    }
  };
  auto unload = [&](int l) {
    for (const std::string& p : projections[size_t(l)]) {
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
  int few_tokens = 0;
  std::pair<std::string, int64_t> fewest{"", INT64_MAX};
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    std::map<std::string, std::vector<float>> hess;  // by site
    std::map<std::string, int64_t> seen;             // tokens by site (an expert's: those routed to it)
    const std::vector<std::string>& projs = projections[size_t(l)];
    load(l);
    bool any = false;
    for (const std::string& p : projs) any |= targets.count(prefix + p) > 0;
    if (any) {
      model.set_observer([&](const std::string& name, const float* x, int64_t nt, int64_t in) {
        const std::string proj = name.substr(prefix.size());
        if (!shared_input_leader(c, proj).empty()) return;  // the input its leader recorded
        accumulate(hess[prefix + proj], x, nt, in);
        seen[prefix + proj] += nt;
      });
      auto ta = now();
      for (int ci = 0; ci < n; ++ci) {  // inputs from the quantized blocks before; X unchanged
        std::copy_n(X.data() + int64_t(ci) * opt.ctx * H, opt.ctx * H, tmp.data());
        auto cache = model.make_cache(opt.ctx);
        model.forward_layer(l, tmp.data(), opt.ctx, 0, *cache);
      }
      model.set_observer(nullptr);
      for (auto& [site, Hs] : hess) symmetrize(Hs, int64_t(std::sqrt(double(Hs.size()))));
      if (c.is_moe_layer(l)) few_tokens += expert_prior(c, prefix, hess, seen, &fewest);
      for (const std::string& p : projs)  // the source weights of the targets are not run again
        if (targets.count(prefix + p)) {
          const Tensor& w = ck.get(prefix + p);
          model.set_linear(l, p, std::make_unique<Unloaded>(w.shape[0], w.shape[1]));
        }
      auto tb = now();
      t_fwd += secs(ta, tb);
      for (const std::string& p : projs) {
        const std::string name = prefix + p;
        if (!targets.count(name)) continue;
        const std::string site = site_of(c, prefix, p);
        const std::vector<float> deq = quantize_one(name, hess.at(site), site, true);
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
  if (few_tokens > 0)
    std::fprintf(stderr,
                 "gptq: %d expert input(s) saw fewer than %lld calibration tokens (fewest: %lld, %s); each expert's "
                 "Hessian has %lld tokens of its layer's expert average added\n",
                 few_tokens, (long long)kExpertPriorTokens, (long long)fewest.second, fewest.first.c_str(),
                 (long long)kExpertPriorTokens);
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
