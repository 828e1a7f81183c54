#include "libquant/bench/gemv_bench.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "formats/error.h"
#include "libquant/linear/linear.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/scheme.h"

namespace qt::bench {
namespace {

// A copy of t in a buffer of its own (the copies must not share pages, or they share cache lines).
Tensor deep_copy(const Tensor& t) {
  if (!t.data) return t;
  return Tensor::owned_bytes(t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
}

}  // namespace

GemvResult run_gemv_bench(const KernelColumn& c, int64_t n, int64_t k, size_t min_bytes, double min_seconds) {
  GemvResult r;
  r.n = n;
  r.k = k;
  std::mt19937 rng(uint32_t(n * 17 + k));
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(size_t(n * k)), x(static_cast<size_t>(k)), y(static_cast<size_t>(n));
  for (auto& v : w) v = d(rng);
  for (auto& v : x) v = d(rng) * 50.0f;

  std::vector<std::unique_ptr<Linear>> lins;
  size_t bytes = 0;
  if (c.scheme.empty()) {
    while (bytes < min_bytes) {
      lins.push_back(make_dense_linear(w.data(), n, k, nullptr, c.bf16 ? Compute::BF16 : Compute::F32));
      bytes += lins.back()->weight_bytes();
    }
  } else {
    const SchemeParams p = scheme_of(c);
    if (!scheme_fits(p, n, k)) return r;
    const PackedTensor packed = quantize_weights(w.data(), n, k, p);
    PackedLinearOptions o;
    if (c.fp_activations) o.act = ActMode::None;
    while (bytes < min_bytes) {
      PackedTensor copy = packed;
      copy.data = deep_copy(packed.data);
      copy.scales = deep_copy(packed.scales);
      copy.biases = deep_copy(packed.biases);
      lins.push_back(make_packed_linear(std::move(copy), nullptr, o));
      bytes += lins.back()->weight_bytes();
    }
  }
  r.kind = lins.front()->kind();
  r.copies = int(lins.size());
  r.bytes_per_pass = double(bytes);

  using Clock = std::chrono::steady_clock;
  auto pass = [&] {
    const auto t0 = Clock::now();
    for (auto& l : lins) l->forward(x.data(), 1, y.data());
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  pass();  // warm-up: scratch buffers, page faults of the copies
  double best = 1e30, total = 0;
  for (int reps = 0; reps < 3 || total < min_seconds; ++reps) {
    const double dt = pass();
    best = std::min(best, dt);
    total += dt;
    if (reps > 200) break;
  }
  r.best_s = best;
  return r;
}

}  // namespace qt::bench
