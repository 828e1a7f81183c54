#include "libquant/bench/gemm_bench.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace qt::bench {

std::vector<GemmShape> smollm2_shapes() {
  const int L = 30;
  return {{"q", 576, 576, L},     {"k", 192, 576, L},   {"v", 192, 576, L},     {"o", 576, 576, L},
          {"gate", 1536, 576, L}, {"up", 1536, 576, L}, {"down", 576, 1536, L}, {"output", 49152, 576, 1}};
}

double GemmResult::gflops() const { return best_s > 0 ? flops() / best_s * 1e-9 : 0; }

std::vector<GemmResult> run_gemm_bench(const std::vector<GemmShape>& shapes, int64_t m, Compute compute,
                                       double min_seconds, int min_reps) {
  using Clock = std::chrono::steady_clock;
  std::vector<GemmResult> out;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const auto& s : shapes) {
    std::vector<float> w(size_t(s.n * s.k)), x(size_t(m * s.k)), y(size_t(m * s.n));
    for (auto& v : w) v = dist(rng) * 0.05f;
    for (auto& v : x) v = dist(rng);
    auto lin = make_dense_linear(w.data(), s.n, s.k, nullptr, compute);
    w.clear();
    w.shrink_to_fit();
    lin->forward(x.data(), m, y.data());  // warm-up: caches, pages, thread pool
    std::vector<double> times;
    double total = 0;
    while (int(times.size()) < min_reps || total < min_seconds) {
      auto t0 = Clock::now();
      lin->forward(x.data(), m, y.data());
      double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      times.push_back(dt);
      total += dt;
      if (times.size() > 10000) break;
    }
    std::sort(times.begin(), times.end());
    out.push_back({s, m, times.front(), times[times.size() / 2]});
  }
  return out;
}

double weighted_gflops(const std::vector<GemmResult>& results) {
  double f = 0, t = 0;
  for (auto& r : results) {
    f += r.shape.count * r.flops();
    t += r.shape.count * r.best_s;
  }
  return t > 0 ? f / t * 1e-9 : 0;
}

}  // namespace qt::bench
