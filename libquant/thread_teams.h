// Several OpenMP teams working at once: persistent threads, each the master of its own team of a
// set size. libgomp gives every thread that starts a parallel region outside any other its own
// pool, so each team's threads are reused from one region to the next; a nested region (a
// parallel region inside another) would instead start its threads afresh every time
// (libgomp/team.c reuses idle threads only for non-nested regions), which the hundreds of
// regions of one forward cannot afford.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qt {

class ThreadTeams {
 public:
  // One team per entry, of that many OpenMP threads (its master included).
  explicit ThreadTeams(std::vector<int> team_threads);
  ~ThreadTeams();
  ThreadTeams(const ThreadTeams&) = delete;
  ThreadTeams& operator=(const ThreadTeams&) = delete;

  int size() const { return int(sizes_.size()); }
  int threads(int team) const { return sizes_[size_t(team)]; }
  // Calls job(i) on team i's master for i in [0, n), n ≤ size(), and returns once every call
  // has; the first exception (lowest i) is rethrown here.
  void run(int n, const std::function<void(int)>& job);

  // `threads` split into `teams` teams as evenly as they go (the larger ones first).
  static std::vector<int> split(int threads, int teams);

 private:
  void loop(int team);

  std::vector<int> sizes_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  uint64_t gen_ = 0;  // one per run()
  int n_ = 0, pending_ = 0;
  bool stop_ = false;
  const std::function<void(int)>* job_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace qt
