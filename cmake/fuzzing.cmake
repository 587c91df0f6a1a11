# CONVGRAPH_FUZZ (declared in the root CMakeLists.txt): build the libFuzzer targets in
# fuzz/ (scripts/fuzz.sh drives them). Needs clang (Debian: clang-14 and libclang-rt-14-dev);
# configure with -DCMAKE_CXX_COMPILER=clang++-14. CONVGRAPH_FUZZ implies CONVGRAPH_SANITIZE,
# so everything in the build (library, tests) has ASan and UBSan; here everything also gets
# -fsanitize=fuzzer-no-link, so libFuzzer sees the library's coverage, and the fuzz
# targets link with -fsanitize=fuzzer (fuzz/CMakeLists.txt). This is the build
# `scripts/test.sh --sanitize` runs the test suite in, and scripts/fuzz.sh reuses it.
# Included near the end of the root CMakeLists.txt, after convgraph_flags is defined.
if(CONVGRAPH_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "CONVGRAPH_FUZZ=ON needs clang (found ${CMAKE_CXX_COMPILER_ID}): "
                        "configure with -DCMAKE_CXX_COMPILER=clang++-14, or use scripts/fuzz.sh")
  endif()
  if(CONVGRAPH_HAVE_CUDA)
    message(FATAL_ERROR "CONVGRAPH_FUZZ=ON builds the CPU library only: add -DCONVGRAPH_WITH_CUDA=OFF")
  endif()
  # Line tables only (-g1): readable stack traces at a fraction of full debug info's cost.
  target_compile_options(convgraph_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link -g1>)
  target_link_options(convgraph_flags INTERFACE -fsanitize=fuzzer-no-link)
  message(STATUS "convgraph: fuzz targets ON (libFuzzer, ASan, UBSan)")
endif()
