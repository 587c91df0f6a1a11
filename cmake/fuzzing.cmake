# CONVGRAPH_FUZZ: build the libFuzzer targets in fuzz/ (scripts/fuzz.sh drives it).
# Needs clang (Debian: clang-14 and libclang-rt-14-dev); configure with
# -DCMAKE_CXX_COMPILER=clang++-14. Everything else in the build (the library above all)
# is then compiled with -fsanitize=fuzzer-no-link,address,undefined, so libFuzzer sees the
# library's coverage and ASan/UBSan check it; the fuzz targets themselves link with
# -fsanitize=fuzzer,address,undefined (fuzz/CMakeLists.txt). UBSan findings abort, so
# the fuzzer reports them as crashes.
# Included near the end of the root CMakeLists.txt, after convgraph_flags is defined.
option(CONVGRAPH_FUZZ "Build the libFuzzer targets in fuzz/ (clang only; sanitized build)" OFF)

if(CONVGRAPH_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "CONVGRAPH_FUZZ=ON needs clang (found ${CMAKE_CXX_COMPILER_ID}): "
                        "configure with -DCMAKE_CXX_COMPILER=clang++-14, or use scripts/fuzz.sh")
  endif()
  if(CONVGRAPH_HAVE_CUDA)
    message(FATAL_ERROR "CONVGRAPH_FUZZ=ON builds the CPU library only: add -DCONVGRAPH_WITH_CUDA=OFF")
  endif()
  target_compile_options(convgraph_flags INTERFACE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
  target_link_options(convgraph_flags INTERFACE -fsanitize=fuzzer-no-link,address,undefined)
  message(STATUS "convgraph: fuzz targets ON (libFuzzer, ASan, UBSan)")
endif()
