#include "libquant/parallel.h"

#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <tuple>

namespace qt {

namespace {

// A number from a sysfs / cgroup file (-1: absent or not a number).
long read_long(const std::string& path) {
  std::ifstream f(path);
  long v = -1;
  if (!(f >> v)) return -1;
  return v;
}

// CPUs the cgroup's CPU quota allows (0: no quota). cgroup v2 "cpu.max" holds "QUOTA PERIOD" or
// "max PERIOD"; v1 splits them into cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us.
int cgroup_cpus() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  long period = 0;
  if (v2 >> quota >> period) {
    if (quota == "max" || period <= 0) return 0;
    return int(std::ceil(std::stod(quota) / double(period)));
  }
  const long q = read_long("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
             p = read_long("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  return q > 0 && p > 0 ? int(std::ceil(double(q) / double(p))) : 0;
}

}  // namespace

int default_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return num_threads();
  int cpus = 0;
  std::set<std::tuple<long, long, long>> cores;  // (package, die, core) of each allowed CPU
  bool topology = true;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    ++cpus;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    const long pkg = read_long(dir + "physical_package_id"), core = read_long(dir + "core_id");
    if (pkg < 0 || core < 0) topology = false;
    cores.insert({pkg, read_long(dir + "die_id"), core});
  }
  int n = topology && !cores.empty() ? int(cores.size()) : cpus;
  if (const int q = cgroup_cpus(); q > 0 && q < n) n = q;
  return n > 0 ? n : 1;
}

void apply_default_threads() {
  if (std::getenv("OMP_NUM_THREADS")) return;
  set_threads(default_threads());
}

}  // namespace qt
