#include "calib/scale_fold.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "calib/scale_search.h"
#include "formats/error.h"
#include "libquant/model/llama.h"
#include "libquant/schemes/grid.h"

namespace qt::calib {

namespace {

bool is_q_or_k(const std::string& name) {
  return name.find("self_attn.q_proj.") != std::string::npos || name.find("self_attn.k_proj.") != std::string::npos;
}

}  // namespace

std::map<std::string, std::vector<float>> search_and_fold(Checkpoint& ck,
                                                          const std::map<std::string, SchemeParams>& plan,
                                                          const std::vector<int32_t>& tokens,
                                                          const ScaleFoldOptions& opt) {
  const ModelConfig& c = ck.config;
  if (!opt.awq && !opt.stats) user_error("--alpha auto: needs --smooth STATS");
  const int ctx = opt.seq.ctx;
  const int n = int(std::min<int64_t>(opt.seq.chunks, int64_t(tokens.size()) / ctx));
  if (n <= 0) user_error("calibration: the text has fewer than {} tokens, one chunk", ctx);
  const int64_t H = c.hidden, T = int64_t(n) * ctx;

  LlamaModel model(ck, dense_linear_factory(Compute::F32));  // the float model: its own copies of the weights
  std::vector<float> X(size_t(T * H));
  std::vector<int32_t> chunk(static_cast<size_t>(ctx));
  for (int ci = 0; ci < n; ++ci) {
    std::copy(tokens.begin() + int64_t(ci) * ctx, tokens.begin() + int64_t(ci + 1) * ctx, chunk.begin());
    if (opt.seq.bos_id >= 0) chunk[0] = opt.seq.bos_id;
    model.embed_tokens(chunk.data(), ctx, X.data() + int64_t(ci) * ctx * H);
  }
  std::map<std::string, std::vector<float>> out;
  ScaleFolder folder(ck);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> alphas;
  for (int i = 0; i < (opt.awq ? 20 : 21); ++i) alphas.push_back(i / 20.0);
  std::map<std::string, std::vector<float>> acts;  // the current block's site inputs [T, cols], by readers[0]
  for (int l = 0; l < c.n_layers; ++l) {
    const std::vector<FoldSite> sites = fold_sites(c, l, opt.sites);
    for (const FoldSite& s : sites) acts[s.readers[0]].assign(size_t(T * s.cols), 0.0f);
    int ci = 0;
    model.set_observer([&](const std::string& name, const float* x, int64_t nt, int64_t in) {
      auto it = acts.find(name);
      if (it != acts.end()) std::copy_n(x, nt * in, it->second.data() + int64_t(ci) * ctx * in);
    });
    for (ci = 0; ci < n; ++ci) {
      auto cache = model.make_cache(ctx);
      model.forward_layer(l, X.data() + int64_t(ci) * ctx * H, ctx, 0, *cache);
    }
    model.set_observer(nullptr);
    std::string report;
    std::vector<std::vector<float>> site_scales;
    for (const FoldSite& site : sites) {
      const std::vector<float>& A = acts.at(site.readers[0]);
      std::vector<SchemeGrid> grids;
      grids.reserve(site.readers.size());
      std::vector<SearchReader> readers;
      bool any = false;
      for (size_t i = 0; i < site.readers.size(); ++i) {
        SearchReader r;
        r.w = folder.weight(site.readers[i]).data();
        r.rows = site.rows[i];
        if (auto p = plan.find(site.readers[i]); p != plan.end() && SchemeGrid(p->second).fits(r.rows, site.cols)) {
          grids.emplace_back(p->second);
          r.grid = &grids.back();
          r.act_quant = find_scheme(p->second.scheme).quantizes_activations();  // W8A8 / W4A8 / FP8
          any = true;
        }
        readers.push_back(r);
      }
      if (!any) {
        site_scales.emplace_back();
        continue;
      }
      std::vector<float> stat;  // per scale: AWQ mean|X|, SmoothQuant max|X|
      std::vector<float> wmax;
      if (opt.awq) {
        std::vector<double> sum(size_t(site.cols), 0.0);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < site.cols; ++j) sum[j] += std::abs(A[t * site.cols + j]);
        std::vector<float> m(size_t(site.cols));
        for (int64_t j = 0; j < site.cols; ++j) m[j] = float(sum[j] / double(T));
        stat = to_scale_space(site, m);
      } else {
        const ChannelStats* a = opt.stats->find(site.readers[0], false);
        if (!a || int64_t(a->absmax.size()) != site.cols)
          user_error("act-stats: no statistics for {} (made for another model?)", site.readers[0]);
        stat = to_scale_space(site, a->absmax);
        for (const SearchReader& r : readers) col_absmax(r.w, r.rows, site.cols, wmax);
        wmax = to_scale_space(site, wmax);
      }
      const ScaleSearchResult best = search_scales(A.data(), T, site.cols, readers, alphas, [&](double a) {
        return to_columns(site, opt.awq ? awq_scales(stat, a) : smooth_scales(stat, wmax, a));
      });
      const std::vector<float> s = best.alpha < 0 ? std::vector<float>(size_t(site.n_scales), 1.0f)
                                   : opt.awq      ? awq_scales(stat, best.alpha)
                                                  : smooth_scales(stat, wmax, best.alpha);
      folder.fold(site, s);
      for (const std::string& r : site.readers) out[r] = best.scales;
      site_scales.push_back(best.scales);
      report += fmt::format(" {:.2f}({:.2g})", best.alpha, best.loss_unit > 0 ? best.loss / best.loss_unit : 1.0);
    }
    if (opt.awq && opt.clip)
      for (size_t k = 0; k < sites.size(); ++k) {
        const FoldSite& site = sites[k];
        if (site_scales[k].empty()) continue;
        std::vector<float> xs(acts.at(site.readers[0]));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < site.cols; ++j) xs[t * site.cols + j] /= site_scales[k][j];
        for (size_t i = 0; i < site.readers.size(); ++i) {
          auto p = plan.find(site.readers[i]);
          if (is_q_or_k(site.readers[i]) || p == plan.end()) continue;
          const SchemeGrid grid(p->second);
          if (!grid.fits(site.rows[i], site.cols)) continue;
          clip_search(grid, folder.weight(site.readers[i]).data(), site.rows[i], site.cols, xs.data(), T);
        }
      }
    {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "%s: block %d/%d, %.0f s; alpha (loss / unscaled) per site:%s\n",
                   opt.awq ? "awq" : "smooth-auto", l + 1, c.n_layers, secs, report.c_str());
    }
  }
  folder.finish();
  return out;
}

}  // namespace qt::calib
