// ThreadTeams: each team's master runs its job with its own OpenMP thread count, the jobs of a
// run all finish before it returns, a job's exception comes back to the caller, and the threads
// split evenly.
#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "libquant/thread_teams.h"

namespace qt {
namespace {

TEST(ThreadTeams, SplitsThreadsEvenly) {
  EXPECT_EQ(ThreadTeams::split(16, 4), (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(ThreadTeams::split(4, 3), (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(ThreadTeams::split(2, 2), (std::vector<int>{1, 1}));
}

TEST(ThreadTeams, EachTeamHasItsThreadCount) {
  ThreadTeams teams({3, 1, 2});
  ASSERT_EQ(teams.size(), 3);
  for (int round = 0; round < 3; ++round) {  // the threads are kept between runs
    std::vector<int> max_threads(3, 0), in_region(3, 0);
    teams.run(3, [&](int i) {
      max_threads[size_t(i)] = omp_get_max_threads();
      std::atomic<int> n{0};
#pragma omp parallel
      n.fetch_add(1);
      in_region[size_t(i)] = n.load();
    });
    EXPECT_EQ(max_threads, (std::vector<int>{3, 1, 2}));
    EXPECT_EQ(in_region, (std::vector<int>{3, 1, 2}));
  }
  std::vector<int> ran(3, 0);
  teams.run(2, [&](int i) { ran[size_t(i)] = 1; });  // fewer jobs than teams
  EXPECT_EQ(ran, (std::vector<int>{1, 1, 0}));
}

TEST(ThreadTeams, RethrowsTheFirstError) {
  ThreadTeams teams({1, 1, 1});
  std::atomic<int> done{0};
  try {
    teams.run(3, [&](int i) {
      done.fetch_add(1);
      if (i > 0) throw std::runtime_error("team " + std::to_string(i));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "team 1");
  }
  EXPECT_EQ(done.load(), 3);
  EXPECT_NO_THROW(teams.run(3, [](int) {}));  // still usable
  EXPECT_THROW(teams.run(4, [](int) {}), std::invalid_argument);
}

}  // namespace
}  // namespace qt
