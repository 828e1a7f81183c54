// A barrier for the threads of one OpenMP team that meet many times a millisecond (the decode
// step: ~4 barriers per layer, a few to tens of microseconds apart). It spins briefly, then
// sleeps (std::atomic::wait, a futex). OpenMP's own barrier under OMP_WAIT_POLICY=passive (which
// quanttool sets, apps/main.cpp) sleeps at once, so every meeting pays a kernel wake-up of tens of
// microseconds; the spin is bounded, so a partner that lost its core on a shared machine costs
// at most kSpinMicros of spinning before this thread yields the core too.
#pragma once
#include <immintrin.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>

namespace qt {

class TeamBarrier {
 public:
  static inline bool kYield = std::getenv("QT_SPIN_YIELD") != nullptr;
  static inline int kSpinMicros = std::getenv("QT_SPIN_US") ? std::atoi(std::getenv("QT_SPIN_US")) : 100;

  // Every one of the team's n threads calls wait(n); returns once all n have.
  void wait(int n) {
    if (n <= 1) return;
    const uint32_t gen = gen_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_seq_cst);  // seq_cst with the sleepers_ load: a sleeper is seen, or it sees gen move
      if (sleepers_.load(std::memory_order_seq_cst) > 0) gen_.notify_all();
      return;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 0;; ++i) {
      if (gen_.load(std::memory_order_acquire) != gen) return;
      if (kYield) sched_yield(); else _mm_pause();
      if ((kYield || (i & 63) == 63) && std::chrono::steady_clock::now() > until) break;
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while (gen_.load(std::memory_order_seq_cst) == gen) gen_.wait(gen, std::memory_order_seq_cst);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint32_t> gen_{0};
  std::atomic<int> sleepers_{0};
};

}  // namespace qt
