#include "libquant/thread_teams.h"

#include <omp.h>

#include <stdexcept>

namespace qt {

ThreadTeams::ThreadTeams(std::vector<int> team_threads) : sizes_(std::move(team_threads)) {
  for (int t : sizes_)
    if (t < 1) throw std::invalid_argument("ThreadTeams: a team needs at least one thread");
  errors_.resize(sizes_.size());
  for (int i = 0; i < size(); ++i) threads_.emplace_back([this, i] { loop(i); });
}

ThreadTeams::~ThreadTeams() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::vector<int> ThreadTeams::split(int threads, int teams) {
  std::vector<int> s(size_t(teams), threads / teams);
  for (int i = 0; i < threads % teams; ++i) ++s[size_t(i)];
  return s;
}

void ThreadTeams::run(int n, const std::function<void(int)>& job) {
  if (n < 0 || n > size()) throw std::invalid_argument("ThreadTeams::run: more jobs than teams");
  if (n == 0) return;
  std::unique_lock<std::mutex> lk(mu_);
  job_ = &job;
  n_ = pending_ = n;
  for (auto& e : errors_) e = nullptr;
  ++gen_;
  start_.notify_all();
  done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
  for (int i = 0; i < n; ++i)
    if (errors_[size_t(i)]) std::rethrow_exception(errors_[size_t(i)]);
}

void ThreadTeams::loop(int team) {
  // The thread count of the regions this thread starts (an ICV of its own, not the process's).
  omp_set_num_threads(sizes_[size_t(team)]);
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    start_.wait(lk, [&] { return stop_ || gen_ != seen; });
    if (stop_) return;
    seen = gen_;
    if (team >= n_) continue;
    const std::function<void(int)>& job = *job_;
    lk.unlock();
    std::exception_ptr err;
    try {
      job(team);
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    errors_[size_t(team)] = err;
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace qt
