// Private to backends/cpu/kernels: closes the region opened by isa_begin.hpp.
#if defined(CONVGRAPH_ISA_TARGET)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef CONVGRAPH_ISA_TARGET
#endif
#undef CONVGRAPH_ISA_PRAGMA
#undef CONVGRAPH_ISA_PRAGMA_
