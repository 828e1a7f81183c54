#include "calib/fused_global_scale.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "calib/weighted_fit.h"
#include "formats/tensor.h"
#include "libquant/model/block_tensors.h"
#include "libquant/schemes/grid.h"

namespace qt::calib {

float search_global_scale(const SchemeParams& p, float gs0, const std::vector<ScaledWeight>& ws, int row_stride) {
  constexpr int kSteps = 16;
  std::vector<double> err(kSteps, 0.0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < kSteps; ++k) {
    SchemeParams q = p;
    q.global_scale = gs0 * std::exp2(-float(k) / kSteps);
    const SchemeGrid grid(q);
    double e = 0;
    for (const ScaledWeight& m : ws) {
      const int64_t gl = grid.group_len(m.cols);
      for (int64_t r = 0; r < m.rows; r += row_stride)
        for (int64_t c = 0; c + gl <= m.cols; c += gl) {
          const float* v = m.w + r * m.cols + c;
          e += weighted_error(grid, v, m.imp + c, gl, fit_weighted(grid, v, m.imp + c, gl));
        }
    }
    err[size_t(k)] = e;
  }
  int best = 0;
  for (int k = 1; k < kSteps; ++k)
    if (err[size_t(k)] < err[size_t(best)]) best = k;
  return gs0 * std::exp2(-float(best) / kSteps);
}

void share_fused_global_scales(const Checkpoint& ck, std::map<std::string, SchemeParams>& plan,
                               const ImportanceOf& importance) {
  const ModelConfig& c = ck.config;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    std::map<std::string, std::vector<std::string>> groups;  // leader -> members (full names)
    for (const std::string& p : block_projections(c, l)) {
      const std::string lead = shared_input_leader(c, p);
      groups[prefix + (lead.empty() ? p : lead)].push_back(prefix + p);
    }
    for (auto& [lead, members] : groups) {
      if (members.size() < 2 && !importance) continue;
      bool all = true;
      for (const std::string& m : members) {
        auto it = plan.find(m);
        all = all && it != plan.end() && find_scheme(it->second.scheme).tensor_scale && ck.has(m) &&
              ck.get(m).shape.size() == 2;
      }
      if (!all) continue;
      float shared = 0.0f;
      std::vector<std::vector<float>> ws;
      std::vector<ScaledWeight> scaled;
      for (const std::string& m : members) {
        const SchemeParams& p = plan.at(m);
        const Tensor& t = ck.get(m);
        ws.push_back(to_f32(t.deferred() ? materialize(t) : t));
        const std::vector<float>& w = ws.back();
        const float gs = find_scheme(p.scheme).tensor_scale(w.data(), int64_t(w.size()), p);
        shared = shared == 0.0f ? gs : std::min(shared, gs);
        const float* imp = importance ? importance(m, t.shape[1]) : nullptr;
        if (imp) scaled.push_back({w.data(), t.shape[0], t.shape[1], imp});
      }
      // Every 8th row: the error totals only rank 16 candidates.
      if (scaled.size() == members.size())
        shared = search_global_scale(plan.at(members[0]), shared, scaled, 8);
      else if (members.size() < 2)
        continue;
      for (const std::string& m : members) plan.at(m).global_scale = shared;
    }
  }
}

}  // namespace qt::calib
