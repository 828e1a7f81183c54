#include "calib/target_bpw.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "calib/type_choice.h"
#include "formats/error.h"
#include "libquant/eval/kld.h"
#include "libquant/linear/linear.h"
#include "libquant/model/llama.h"

namespace qt::calib {

namespace {

double weighted_error(const std::vector<float>& w, const std::vector<float>& q, int64_t rows, int64_t cols,
                      const float* imp) {
  double e = 0;
#pragma omp parallel for reduction(+ : e) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double d = double(w[size_t(r * cols + j)]) - double(q[size_t(r * cols + j)]);
      s += (imp ? double(imp[j]) : 1.0) * d * d;
    }
    e += s;
  }
  return e;
}

// "model.layers.3.self_attn.q_proj.weight" -> {3, "self_attn.q_proj.weight"}; {-1, ""} otherwise.
std::pair<int, std::string> block_of(const std::string& hf) {
  const std::string pre = "model.layers.";
  if (hf.rfind(pre, 0) != 0) return {-1, ""};
  const size_t dot = hf.find('.', pre.size());
  return {std::stoi(hf.substr(pre.size(), dot - pre.size())), hf.substr(dot + 1)};
}

// The KL divergence of the model with one weight replaced, against the unquantized model, over
// the scored positions of the calibration chunks. The blocks' inputs of the unquantized model
// are kept, so a block weight's probe runs only the blocks from its own on.
class Prober {
 public:
  Prober(const Checkpoint& ck, const TargetOptions& opt) : ck_(ck), o_(opt), model_(ck, Compute::F32) {
    const ModelConfig& c = ck.config;
    n_ = int(std::min<int64_t>(opt.chunks, int64_t(opt.tokens.size()) / opt.ctx));
    if (n_ <= 0) user_error("--calib: the text has fewer than {} tokens, one chunk", opt.ctx);
    first_ = opt.ctx / 2;
    scored_ = opt.ctx - 1 - first_;
    H_ = c.hidden;
    const size_t per = size_t(opt.ctx) * size_t(H_);
    X_.assign(size_t(c.n_layers) * size_t(n_) * per, 0.0f);
    base_.resize(size_t(n_) * size_t(scored_) * size_t(c.vocab));
    chunk_.resize(size_t(n_));
    std::vector<float> x(per), h(per);
    for (int ci = 0; ci < n_; ++ci) {
      auto& t = chunk_[size_t(ci)];
      t.assign(opt.tokens.begin() + int64_t(ci) * opt.ctx, opt.tokens.begin() + int64_t(ci + 1) * opt.ctx);
      if (opt.bos_id >= 0) t[0] = opt.bos_id;
      model_.embed_tokens(t.data(), opt.ctx, x.data());
      auto cache = model_.make_cache(opt.ctx);
      for (int l = 0; l < c.n_layers; ++l) {
        std::copy(x.begin(), x.end(), X_.begin() + int64_t((size_t(l) * size_t(n_) + size_t(ci)) * per));
        model_.forward_layer(l, x.data(), opt.ctx, 0, *cache);
      }
      model_.final_norm(x.data(), opt.ctx, h.data());
      model_.output_head(h.data() + size_t(first_) * size_t(H_), scored_,
                         base_.data() + size_t(ci) * size_t(scored_) * size_t(c.vocab));
    }
  }

  double probe(const std::string& hf, const std::vector<float>& deq) {
    const auto [l, proj] = block_of(hf);
    if (l < 0) {  // the embedding or the head: a model with that tensor replaced, run whole
      Checkpoint alt;
      alt.path = ck_.path, alt.source_kind = ck_.source_kind, alt.config = ck_.config, alt.tensors = ck_.tensors;
      alt.tensors[hf] = Tensor::from_f32(deq, ck_.get(hf).shape);
      LlamaModel m(alt, Compute::F32);
      return run(m, 0);
    }
    const Tensor& w = ck_.get(hf);
    const std::string bias_name = hf.substr(0, hf.size() - 6) + "bias";
    const std::vector<float> b = ck_.has(bias_name) ? to_f32(ck_.get(bias_name)) : std::vector<float>();
    model_.set_linear(
        l, proj, make_dense_linear(deq.data(), w.shape[0], w.shape[1], b.empty() ? nullptr : b.data(), Compute::F32));
    const double k = run(model_, l);
    model_.set_linear(l, proj, make_dense_linear(w, b.empty() ? nullptr : b.data(), Compute::F32));
    return k;
  }

 private:
  // Mean KLD of `m` run from block l0 on (the kept inputs of block l0) against the base.
  double run(LlamaModel& m, int l0) {
    const ModelConfig& c = ck_.config;
    const size_t per = size_t(o_.ctx) * size_t(H_);
    std::vector<float> x(per), h(per), logits(size_t(scored_) * size_t(c.vocab));
    double sum = 0;
    for (int ci = 0; ci < n_; ++ci) {
      auto cache = m.make_cache(o_.ctx);
      if (l0 == 0 && &m != &model_) {
        m.embed_tokens(chunk_[size_t(ci)].data(), o_.ctx, x.data());
      } else {
        const auto src = X_.begin() + int64_t((size_t(l0) * size_t(n_) + size_t(ci)) * per);
        std::copy(src, src + int64_t(per), x.begin());
      }
      for (int l = l0; l < c.n_layers; ++l) m.forward_layer(l, x.data(), o_.ctx, 0, *cache);
      m.final_norm(x.data(), o_.ctx, h.data());
      m.output_head(h.data() + size_t(first_) * size_t(H_), scored_, logits.data());
      const float* base = base_.data() + size_t(ci) * size_t(scored_) * size_t(c.vocab);
      for (int r = 0; r < scored_; ++r) {
        const int target = chunk_[size_t(ci)][size_t(first_ + r + 1)];
        sum +=
            kld_token(base + size_t(r) * size_t(c.vocab), logits.data() + size_t(r) * size_t(c.vocab), c.vocab, target)
                .kld;
      }
    }
    return sum / double(int64_t(n_) * scored_);
  }

  const Checkpoint& ck_;
  const TargetOptions& o_;
  LlamaModel model_;
  int n_ = 0, first_ = 0, scored_ = 0;
  int64_t H_ = 0;
  std::vector<float> X_, base_;
  std::vector<std::vector<int32_t>> chunk_;
};

// Whether a probe listed before candidate k fits the weight (the first listed that fits is used).
bool fits_earlier_probe(const TargetCandidates& cands, size_t k, int64_t rows, int64_t cols) {
  for (const std::string& p : cands.probes) {
    if (p == cands.names[k]) return false;
    const size_t j = size_t(std::find(cands.names.begin(), cands.names.end(), p) - cands.names.begin());
    if (j < cands.names.size() && cands.fits(j, rows, cols)) return true;
  }
  return false;
}

}  // namespace

std::vector<TargetWeight> measure_target(const Checkpoint& ck, const std::vector<std::string>& hf_names,
                                         const TargetCandidates& cands, const TargetOptions& opt) {
  std::vector<TargetWeight> out;
  std::unique_ptr<Prober> prober;
  const auto t0 = std::chrono::steady_clock::now();
  if (!opt.tokens.empty()) prober = std::make_unique<Prober>(ck, opt);
  const bool tty = opt.progress && isatty(2);
  int done = 0;
  for (const std::string& hf : hf_names) {
    const Tensor& t = ck.get(hf);
    TargetWeight w;
    w.hf = hf, w.label = cands.label(hf);
    w.rows = t.shape.at(0), w.cols = t.shape.at(1);
    const std::vector<float> v = to_f32(materialize(t));
    const float* imp = opt.importance ? opt.importance(hf, w.cols) : nullptr;
    bool probed = false;
    for (size_t k = 0; k < cands.names.size(); ++k) {
      if (!cands.fits(k, w.rows, w.cols)) continue;
      uint64_t bytes = 0;
      const std::vector<float> q = cands.round_trip(k, hf, v, w.rows, w.cols, imp, &bytes);
      w.cands.push_back(cands.names[k]);
      w.bytes.push_back(bytes);
      w.err.push_back(weighted_error(v, q, w.rows, w.cols, imp));
      if (prober && !probed &&
          std::find(cands.probes.begin(), cands.probes.end(), cands.names[k]) != cands.probes.end() &&
          !fits_earlier_probe(cands, k, w.rows, w.cols)) {
        const double kld = prober->probe(hf, q);
        w.sensitivity = w.err.back() > 0 ? kld / w.err.back() : 0;
        probed = true;
      }
    }
    if (w.cands.empty()) user_error("{}: tensor {} [{}, {}]: no candidate fits it", ck.path, hf, w.rows, w.cols);
    if (prober && !probed)
      user_error("{}: tensor {} [{}, {}]: no probe candidate fits it", ck.path, hf, w.rows, w.cols);
    out.push_back(std::move(w));
    if (tty) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\rtarget-bpw: %d/%zu weights measured, %.0f s", ++done, hf_names.size(), s);
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  return out;
}

TargetPlan choose_target(std::vector<TargetWeight> weights, double bpw, const std::vector<std::string>& allowed) {
  TargetPlan plan;
  plan.weights = std::move(weights);
  if (!allowed.empty())
    for (TargetWeight& w : plan.weights) {
      TargetWeight kept = w;
      kept.cands.clear(), kept.bytes.clear(), kept.err.clear();
      for (size_t k = 0; k < w.cands.size(); ++k)
        if (std::find(allowed.begin(), allowed.end(), w.cands[k]) != allowed.end())
          kept.cands.push_back(w.cands[k]), kept.bytes.push_back(w.bytes[k]), kept.err.push_back(w.err[k]);
      if (kept.cands.empty())
        user_error("--target-types: no allowed candidate fits {} (rows of {} elements)", w.label, w.cols);
      w = std::move(kept);
    }
  for (const TargetWeight& w : plan.weights) plan.elements += uint64_t(w.rows * w.cols);
  std::vector<std::vector<TypeCandidate>> cands;
  uint64_t least = 0, most = 0;
  for (const TargetWeight& w : plan.weights) {
    auto& c = cands.emplace_back();
    for (size_t k = 0; k < w.cands.size(); ++k) c.push_back({w.bytes[k], w.sensitivity * w.err[k]});
    least += *std::min_element(w.bytes.begin(), w.bytes.end());
    most += *std::max_element(w.bytes.begin(), w.bytes.end());
  }
  const double lo = 8.0 * double(least) / double(plan.elements), hi = 8.0 * double(most) / double(plan.elements);
  if (!(bpw >= lo - 1e-9 && bpw <= hi + 1e-9))
    user_error("--target-bpw {}: outside what the candidate types reach for this model ({:.3f} to {:.3f})", bpw, lo,
               hi);
  const uint64_t budget = uint64_t(bpw * double(plan.elements) / 8.0);
  const TypeChoice ch = choose_types(cands, std::max(budget, least));
  for (size_t i = 0; i < plan.weights.size(); ++i) plan.weights[i].pick = ch.pick[i];
  plan.bytes = ch.bytes, plan.loss = ch.loss;
  return plan;
}

nlohmann::json target_to_json(const std::vector<TargetWeight>& weights) {
  nlohmann::json j = nlohmann::json::array();
  for (const TargetWeight& w : weights)
    j.push_back({{"hf", w.hf},
                 {"label", w.label},
                 {"rows", w.rows},
                 {"cols", w.cols},
                 {"types", w.cands},
                 {"bytes", w.bytes},
                 {"err", w.err},
                 {"sensitivity", w.sensitivity}});
  return {{"weights", j}};
}

std::vector<TargetWeight> target_from_json(const nlohmann::json& j, const std::vector<std::string>& hf_names,
                                           const TargetCandidates& cands, const std::string& what) {
  std::vector<TargetWeight> out;
  try {
    for (const auto& e : j.at("weights")) {
      TargetWeight w;
      w.hf = e.at("hf"), w.rows = e.at("rows"), w.cols = e.at("cols");
      w.label = e.contains("label") ? e.at("label") : e.at("gguf");  // "gguf": files from before mlx plans
      w.cands = e.at("types").get<std::vector<std::string>>();
      for (const std::string& c : w.cands)
        if (std::find(cands.names.begin(), cands.names.end(), c) == cands.names.end())
          user_error("{}: unknown candidate {}", what, c);
      w.bytes = e.at("bytes").get<std::vector<uint64_t>>();
      w.err = e.at("err").get<std::vector<double>>();
      w.sensitivity = e.at("sensitivity");
      if (w.bytes.size() != w.cands.size() || w.err.size() != w.cands.size() || w.cands.empty())
        user_error("{}: {} has lists of different lengths", what, w.hf);
      out.push_back(std::move(w));
    }
  } catch (const nlohmann::json::exception& e) {
    user_error("{}: not a --measurements file ({})", what, e.what());
  }
  std::vector<std::string> have;
  for (auto& w : out) have.push_back(w.hf);
  if (have != hf_names) user_error("{}: measured for other weights than this model's", what);
  return out;
}

std::string target_main_candidate(const TargetPlan& plan) {
  std::map<std::string, uint64_t> by;
  for (const TargetWeight& w : plan.weights) by[w.cands[size_t(w.pick)]] += w.bytes[size_t(w.pick)];
  std::string best;
  uint64_t most = 0;
  for (auto& [name, b] : by)
    if (b > most) most = b, best = name;
  return best;
}

}  // namespace qt::calib
