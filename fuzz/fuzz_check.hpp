// SPDX-License-Identifier: Apache-2.0
#pragma once
// FUZZ_CHECK: a property a fuzz target asserts about the code under test. A failure prints
// the property and aborts, which libFuzzer reports as a crash (and saves the input) and the
// replay test (replay_main.cpp) reports as a failed ctest; unlike assert() it is never
// compiled out.

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                                     \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, what); \
      std::abort();                                                                                \
    }                                                                                              \
  } while (false)
