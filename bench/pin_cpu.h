#pragma once
// Shared by the plan benchmarks: one core, as `taskset -c 0` (the targets are "on one core").
#include <sched.h>

inline void pin_to_cpu0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  sched_setaffinity(0, sizeof set, &set);
}
