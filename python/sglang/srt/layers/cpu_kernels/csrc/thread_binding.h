// Binding the decode step's team to cores (sglang/srt/managers/cpu_binding.py decides which).
// The team is the process's one OpenMP pool (torch's libgomp, which this library links: torch's own parallel
// ops share it), the one team_step.h's region forks: libgomp hands team member t the same pool thread in every
// region of the same size, so binding member t once binds it for good.
// Included by decode_step.cpp.
#pragma once
#include <omp.h>
#include <sched.h>

#include <vector>

namespace {

// Member t of a team of cpus.size() threads (the caller is member 0) to core cpus[t]; the members bound
// (fewer when the kernel refuses a core, e.g. one outside the process's cgroup)
inline int64_t bind_team(const std::vector<int64_t>& cpus) {
  const int nt = static_cast<int>(cpus.size());
  int64_t bound = 0;
  if (nt == 0) return 0;
#pragma omp parallel num_threads(nt) reduction(+ : bound)
  {
    const int t = omp_get_thread_num();
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpus[t] >= 0 && cpus[t] < CPU_SETSIZE) {
      CPU_SET(static_cast<int>(cpus[t]), &set);
      bound += sched_setaffinity(0, sizeof(set), &set) == 0 ? 1 : 0;
    }
  }
  return bound;
}

}  // namespace
