#pragma once
// Private to backends/cpu/kernels: software prefetch of a span of memory about to be read
// or written, issued while other work runs so the span's misses overlap it. Include it after
// isa_begin.hpp (and <cstdint> before it): like every helper there, it is compiled per level.
#include <cstdint>

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

/// Asks for every cache line of the n elements at p (from the line p starts in: p need not
/// start one). kWrite: the span is about to be written; kLocality: __builtin_prefetch's
/// (2 fetches into L2 on x86, 3 into L1).
template <bool kWrite = false, int kLocality = 2, class T>
inline void prefetch_span(const T* p, std::int64_t n) {
  const auto first = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{63};
  const auto end = reinterpret_cast<std::uintptr_t>(p + n);
  for (std::uintptr_t line = first; line < end; line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(line), kWrite ? 1 : 0, kLocality);
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
