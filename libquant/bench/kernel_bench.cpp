#include "libquant/bench/kernel_bench.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>

#include "formats/error.h"
#include "libquant/linear/linear.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/scheme.h"

namespace qt::bench {

std::vector<KernelColumn> default_kernel_columns() {
  return {
      {"f32", "", 0, 0, false, false},
      {"bf16", "", 0, 0, true, false},
      {"w8a8", "int8", 8, 0, false, false},
      {"w8a8-g128", "int8", 8, 128, false, false},
      {"w4a8", "int4", 4, 0, false, false},
      {"affine8-g64", "affine", 8, 64, false, false},
      {"affine4-g64", "affine", 4, 64, false, false},
      {"affine8-g64-bf16", "affine", 8, 64, false, false, DType::BF16},
      {"affine4-g64-bf16", "affine", 4, 64, false, false, DType::BF16},
      {"nf4-b64", "nf4", 4, 64, false, false},
      {"nf4-b64-bf16", "nf4", 4, 64, false, false, DType::BF16},
      {"w8a8-fp-act", "int8", 8, 0, false, true},
  };
}

SchemeParams scheme_of(const KernelColumn& c) {
  SchemeParams p;
  p.scheme = c.scheme;
  p.bits = c.bits;
  p.group_size = c.group;
  p.dtype = c.dtype;
  return p;
}

namespace {

std::unique_ptr<Linear> build(const KernelColumn& c, const std::vector<float>& w, int64_t n, int64_t k) {
  if (c.scheme.empty()) return make_dense_linear(w.data(), n, k, nullptr, c.bf16 ? Compute::BF16 : Compute::F32);
  const SchemeParams p = scheme_of(c);
  if (!scheme_fits(p, n, k)) return nullptr;
  PackedLinearOptions o;
  if (c.fp_activations) o.act = ActMode::None;
  return make_packed_linear(quantize_weights(w.data(), n, k, p), nullptr, o);
}

double time_forward(const Linear& l, const std::vector<float>& x, int64_t m, std::vector<float>& y,
                    double min_seconds) {
  using Clock = std::chrono::steady_clock;
  l.forward(x.data(), m, y.data());  // warm-up: scratch buffers, pages
  double best = 1e30, total = 0;
  for (int reps = 0; reps < 2 || total < min_seconds; ++reps) {
    const auto t0 = Clock::now();
    l.forward(x.data(), m, y.data());
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, dt);
    total += dt;
    if (reps > 1000) break;
  }
  return best;
}

}  // namespace

std::vector<KernelRow> run_kernel_bench(const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>& shapes,
                                        const std::vector<int64_t>& ms, const std::vector<KernelColumn>& columns,
                                        double min_seconds) {
  std::vector<KernelRow> rows;
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  for (auto& [name, nk] : shapes) {
    const auto [n, k] = nk;
    std::mt19937 rng(uint32_t(n * 31 + k));
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<float> w(size_t(n * k)), x(size_t(max_m * k)), y(size_t(max_m * n));
    for (auto& v : w) v = d(rng);
    for (auto& v : x) v = d(rng) * 50.0f;
    const size_t first = rows.size();
    for (int64_t m : ms) rows.push_back({name, n, k, m, std::vector<KernelCell>(columns.size())});
    for (size_t c = 0; c < columns.size(); ++c) {
      std::unique_ptr<Linear> lin;
      try {
        lin = build(columns[c], w, n, k);
      } catch (const UserError&) {
        lin = nullptr;  // e.g. a kernel family this build lacks
      }
      if (!lin) continue;
      for (size_t i = 0; i < ms.size(); ++i)
        rows[first + i].cells[c] = {time_forward(*lin, x, ms[i], y, min_seconds), lin->kind()};
    }
  }
  return rows;
}

}  // namespace qt::bench
