// A barrier for the threads of one OpenMP team that meet many times a millisecond (the decode
// step: 5 barriers a layer, tens of microseconds apart). OpenMP's own barrier under
// OMP_WAIT_POLICY=passive (which quanttool sets, apps/main.cpp) sleeps at once, so every meeting
// pays a kernel wake-up; spinning pays off only while the partner is on a core: on a shared
// machine a partner that lost its core keeps the spinner waiting for a whole time slice, and the
// spinning takes a core from whoever else would run. So the spin is adaptive, per thread: it
// covers twice the waits that ended within kMaxSpinNs (the partner was running), halves after a
// wait that did not (it was not), and past the budget the thread sleeps on a futex.
// 30 us: on this 2-core machine under other engineers' load, 100 us of spinning made the decode
// step 12% slower than sleeping at once, 30 us was as fast (medians of 5 alternated runs).
// Not std::atomic::wait: libstdc++'s spins with sched_yield first, and on a loaded machine each
// yield hands the core to another process for a time slice while the partner may already have
// arrived (measured: 1-2 tok/s against 10 for the per-Linear forks at a load of 12 on 2 cores;
// 21 with the futex).
#pragma once
#include <immintrin.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace qt {

class TeamBarrier {
 public:
  static constexpr int64_t kMaxSpinNs = 30'000;

  // Every one of the team's n threads calls wait(n); returns once all n have.
  void wait(int n) {
    if (n <= 1) return;
    const uint32_t gen = gen_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      // seq_cst with the sleepers_ load: either a sleeper is counted here or it sees gen move.
      gen_.fetch_add(1, std::memory_order_seq_cst);
      if (sleepers_.load(std::memory_order_seq_cst) > 0) futex(FUTEX_WAKE_PRIVATE, INT_MAX);
      return;
    }
    using clock = std::chrono::steady_clock;
    thread_local int64_t budget_ns = kMaxSpinNs;
    const auto t0 = clock::now();
    const auto until = t0 + std::chrono::nanoseconds(budget_ns);
    bool done = false;
    for (int i = 0;; ++i) {
      if (gen_.load(std::memory_order_acquire) != gen) {
        done = true;
        break;
      }
      _mm_pause();
      if ((i & 31) == 31 && clock::now() >= until) break;
    }
    if (!done) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (gen_.load(std::memory_order_seq_cst) == gen) futex(FUTEX_WAIT_PRIVATE, gen);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    const int64_t waited = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count();
    budget_ns = waited <= kMaxSpinNs ? std::min(kMaxSpinNs, std::max(budget_ns, 2 * waited)) : budget_ns / 2;
  }

 private:
  // FUTEX_WAIT: sleep while gen_ still holds val; FUTEX_WAKE: wake up to val sleepers.
  void futex(int op, uint32_t val) {
    static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&gen_), op, val, nullptr, nullptr, 0);
  }

  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint32_t> gen_{0};
  std::atomic<int> sleepers_{0};
};

}  // namespace qt
