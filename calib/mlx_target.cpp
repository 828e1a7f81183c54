#include "calib/mlx_target.h"

#include <cstdio>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qt::calib {

namespace {

// mlx's affine bit widths and group sizes (mlx.core.quantize), in a fixed order.
constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {128, 64, 32};

std::pair<int, int> parse(const std::string& name) {
  int b = 0, g = 0;
  std::sscanf(name.c_str(), "b%dg%d", &b, &g);
  return {b, g};
}

}  // namespace

TargetCandidates mlx_target_candidates(const WeightCalibration& calib, DType dtype) {
  TargetCandidates c;
  std::vector<SchemeParams> params;
  for (int b : kBits)
    for (int g : kGroups) {
      SchemeParams p;
      p.scheme = "affine", p.bits = b, p.group_size = g, p.dtype = dtype;
      params.push_back(p);
      c.names.push_back(fmt::format("b{}g{}", b, g));
    }
  c.probes = {"b4g64", "b4g32"};
  c.fits = [params](size_t k, int64_t rows, int64_t cols) { return scheme_fits(params[k], rows, cols); };
  c.round_trip = [params, &calib](size_t k, const std::string& hf, const std::vector<float>& w, int64_t rows,
                                  int64_t cols, const float*, uint64_t* bytes) {
    // As pack_checkpoint quantizes a planned weight: the calibrated quantizer where it applies.
    std::optional<PackedTensor> q = calib.quantize(hf, w.data(), rows, cols, params[k]);
    if (!q) q = quantize_weights(w.data(), rows, cols, params[k], hf);
    *bytes = q->bytes();
    return dequantize_weights(*q, hf);
  };
  c.label = [](const std::string& hf) { return hf; };
  return c;
}

std::string mlx_target_recipe(const TargetPlan& plan, const std::string& comment) {
  std::string out = "{\"comment\": " + nlohmann::json(comment).dump() + ",\n \"rules\": [";
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    const TargetWeight& w = plan.weights[i];
    const auto [b, g] = parse(w.cands[size_t(w.pick)]);
    out += (i ? ",\n  " : "\n  ") +
           nlohmann::ordered_json{{"match", w.hf}, {"bits", b}, {"group_size", g}}.dump(-1, ' ', false);
  }
  return out + "]}\n";
}

}  // namespace qt::calib
