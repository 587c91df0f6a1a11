// Private to backends/cpu/kernels: opens the region compiled for CONVGRAPH_ISA_NS.
//
// Include it after every other header and close it with isa_end.hpp. Between the two, each
// function definition (templates and lambdas included) is compiled for the level, while
// everything defined before it (the standard library, Eigen, shared inline helpers) keeps
// the translation unit's baseline target. That is what makes three copies of one kernel in
// one library safe: an inline function or template instance that two levels share is
// emitted once by the linker, so it must never contain level-specific instructions, and
// the kernel's own code lives in the level's namespace, where no other level sees it.
// One trap remains: GCC vector types (float __attribute__((vector_size(64)))) are not
// namespaced and their alignment depends on the level (16 bytes without AVX-512, 64 with),
// so a standard template over them (std::vector<vec>, std::fill on vec*) is one shared
// instance with the wrong alignment for some level. Use plain arrays or a level-local type.
// And a generic vector wider than the level's registers (64 bytes below AVX-512) is lowered
// through the stack in loops: hot loops use the level's native width (winograd.cpp's
// kVL): 64-byte accumulators ran 4-14x slower on AVX2 (Zen 3).
//
// GCC does not update __AVX2__/__AVX512F__ after a target pragma in C++, so the kernels
// test CONVGRAPH_ISA_AVX2 / CONVGRAPH_ISA_AVX512 instead. With CONVGRAPH_NATIVE=ON the
// whole library is built for the build host and every level gets at least its features.
#if !defined(CONVGRAPH_ISA_NS) || !defined(CONVGRAPH_ISA_LEVEL)
#error "backends/cpu/kernels/ files are compiled once per level: CMake defines CONVGRAPH_ISA_NS and CONVGRAPH_ISA_LEVEL"
#endif

// The intrinsics, declared before the region: GCC and clang give each its own target.
// (GCC 12's AVX-512 headers raise false -Wuninitialized warnings: GCC bug 105593.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#if CONVGRAPH_ISA_LEVEL == 2 && defined(CONVGRAPH_ISA_EMULATED)
#include "backends/cpu/kernels/avx512_emulation.hpp"
#endif

#define CONVGRAPH_ISA_AVX2 (CONVGRAPH_ISA_LEVEL >= 1)
#define CONVGRAPH_ISA_AVX512 (CONVGRAPH_ISA_LEVEL >= 2)
/// Bytes of the level's vector registers: the width for hot loops' generic vectors.
#define CONVGRAPH_ISA_VECTOR_BYTES (CONVGRAPH_ISA_AVX512 ? 64 : CONVGRAPH_ISA_AVX2 ? 32 : 16)

#define CONVGRAPH_ISA_AVX2_TARGET "avx2,fma,bmi,bmi2,f16c,lzcnt,movbe,popcnt"
#if CONVGRAPH_ISA_LEVEL == 2 && !defined(CONVGRAPH_ISA_EMULATED)
#define CONVGRAPH_ISA_TARGET "avx512f,avx512bw,avx512cd,avx512dq,avx512vl," CONVGRAPH_ISA_AVX2_TARGET
#elif CONVGRAPH_ISA_LEVEL >= 1
// (A test build's emulated AVX-512 level, CMake CONVGRAPH_EMULATE_AVX512, takes AVX2's
// target: the level's code, 16-lane vectors included, its intrinsics emulated.)
#define CONVGRAPH_ISA_TARGET CONVGRAPH_ISA_AVX2_TARGET
#endif

#if defined(CONVGRAPH_ISA_TARGET)
#if defined(__clang__)
#define CONVGRAPH_ISA_PRAGMA_(x) _Pragma(#x)
#define CONVGRAPH_ISA_PRAGMA(t) \
  CONVGRAPH_ISA_PRAGMA_(clang attribute push(__attribute__((target(t))), apply_to = function))
CONVGRAPH_ISA_PRAGMA(CONVGRAPH_ISA_TARGET)
#else
#pragma GCC push_options
#define CONVGRAPH_ISA_PRAGMA_(x) _Pragma(#x)
#define CONVGRAPH_ISA_PRAGMA(t) CONVGRAPH_ISA_PRAGMA_(GCC target(t))
CONVGRAPH_ISA_PRAGMA(CONVGRAPH_ISA_TARGET)
#endif
#endif
