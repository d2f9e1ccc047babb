// Runtime value -> compile-time constant, for picking a kernel template instantiation
// (as flash-attention's static_switch.h):
//
//   AL_BOOL_SWITCH(v.sample_teams, ST, [&] { fn(kernel<T, ST>); });
//
// runs the lambda once with `constexpr static bool ST` true or false; both are
// instantiated. AL_VPT_SWITCH does the same for the vectors a thread holds (1 or 2).
#pragma once

#define AL_BOOL_SWITCH(COND, CONST_NAME, ...)   \
  [&] {                                         \
    if (COND) {                                 \
      constexpr static bool CONST_NAME = true;  \
      return __VA_ARGS__();                     \
    } else {                                    \
      constexpr static bool CONST_NAME = false; \
      return __VA_ARGS__();                     \
    }                                           \
  }()

#define AL_VPT_SWITCH(VPT_VALUE, CONST_NAME, ...) \
  [&] {                                           \
    if ((VPT_VALUE) == 2) {                       \
      constexpr static int CONST_NAME = 2;        \
      return __VA_ARGS__();                       \
    } else {                                      \
      constexpr static int CONST_NAME = 1;        \
      return __VA_ARGS__();                       \
    }                                             \
  }()
