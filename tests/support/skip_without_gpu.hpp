#pragma once
// SKIP_WITHOUT_GPU(): ends the current test case when no usable GPU is present, with a
// "SKIPPED: no GPU: <reason>" warning that ctest reports as a skip (tests/CMakeLists.txt,
// SKIP_REGULAR_EXPRESSION). Use it as the first statement of a GPU-only TEST_CASE.
#include <catch2/catch.hpp>

#include "convgraph/backends/cuda.hpp"

#define SKIP_WITHOUT_GPU()                                                      \
  do {                                                                          \
    if (!::convgraph::cuda_info().available) {                                  \
      WARN("SKIPPED: no GPU: " << ::convgraph::cuda_info().reason);             \
      return;                                                                   \
    }                                                                           \
  } while (0)
