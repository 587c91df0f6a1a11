#pragma once
// Private to backends/cpu: calling a kernel compiled once per CPU level.
//
// Every file in backends/cpu/kernels/ is compiled three times (CMake: one object library per
// level), each time with CONVGRAPH_ISA_NS = baseline, avx2 or avx512, so its entry points
// exist as cpu::baseline::f, cpu::avx2::f and cpu::avx512::f (or, in a build with one level,
// CMake CONVGRAPH_CPU_LEVELS=HOST, only that level's). A caller declares them once
// with CONVGRAPH_ISA_DECLARE (in namespace convgraph::cpu) and calls the active level's variant with CONVGRAPH_ISA_CALL.
#include "convgraph/backends/cpu/cpu_isa.hpp"

#if defined(CONVGRAPH_ISA_ONLY_NS)
// A build with one level (CMake CONVGRAPH_CPU_LEVELS=HOST): every call goes to it.
#define CONVGRAPH_ISA_DECLARE(...) \
  namespace CONVGRAPH_ISA_ONLY_NS { __VA_ARGS__; }
#define CONVGRAPH_ISA_CALL(fn, ...) (::convgraph::cpu::CONVGRAPH_ISA_ONLY_NS::fn(__VA_ARGS__))
// For results that are the same at every level (workspace sizes): any compiled level.
#define CONVGRAPH_ISA_ANY(fn) ::convgraph::cpu::CONVGRAPH_ISA_ONLY_NS::fn
#else
#define CONVGRAPH_ISA_DECLARE(...)   \
  namespace baseline { __VA_ARGS__; } \
  namespace avx2 { __VA_ARGS__; }     \
  namespace avx512 { __VA_ARGS__; }

// The active level's variant of `fn` (declared with CONVGRAPH_ISA_DECLARE in namespace
// convgraph::cpu), called with the remaining arguments.
#define CONVGRAPH_ISA_CALL(fn, ...)                                    \
  (::convgraph::active_cpu_isa() == ::convgraph::CpuIsa::avx512      \
       ? ::convgraph::cpu::avx512::fn(__VA_ARGS__)                     \
       : ::convgraph::active_cpu_isa() == ::convgraph::CpuIsa::avx2    \
             ? ::convgraph::cpu::avx2::fn(__VA_ARGS__)                 \
             : ::convgraph::cpu::baseline::fn(__VA_ARGS__))
#define CONVGRAPH_ISA_ANY(fn) ::convgraph::cpu::baseline::fn
#endif
