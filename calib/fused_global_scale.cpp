#include "calib/fused_global_scale.h"

#include <algorithm>
#include <vector>

#include "formats/tensor.h"
#include "libquant/model/block_tensors.h"

namespace qt::calib {

void share_fused_global_scales(const Checkpoint& ck, std::map<std::string, SchemeParams>& plan) {
  const ModelConfig& c = ck.config;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    std::map<std::string, std::vector<std::string>> groups;  // leader -> members (full names)
    for (const std::string& p : block_projections(c, l)) {
      const std::string lead = shared_input_leader(c, p);
      groups[prefix + (lead.empty() ? p : lead)].push_back(prefix + p);
    }
    for (auto& [lead, members] : groups) {
      if (members.size() < 2) continue;
      bool all = true;
      for (const std::string& m : members) {
        auto it = plan.find(m);
        all = all && it != plan.end() && find_scheme(it->second.scheme).tensor_scale && ck.has(m) &&
              ck.get(m).shape.size() == 2;
      }
      if (!all) continue;
      float shared = 0.0f;
      for (const std::string& m : members) {
        const SchemeParams& p = plan.at(m);
        const Tensor& t = ck.get(m);
        const std::vector<float> w = to_f32(t.deferred() ? materialize(t) : t);
        const float gs = find_scheme(p.scheme).tensor_scale(w.data(), int64_t(w.size()), p);
        shared = shared == 0.0f ? gs : std::min(shared, gs);
      }
      for (const std::string& m : members) plan.at(m).global_scale = shared;
    }
  }
}

}  // namespace qt::calib
