// im2col / col2im: calls the active CPU level's variant (kernels/im2col.cpp).
#include "backends/cpu/im2col.hpp"

#include "backends/cpu/kernels/isa_dispatch.hpp"

namespace convgraph::cpu {

CONVGRAPH_ISA_DECLARE(template <class T> void im2col(const ConvGeometry&, const T*, i64, i64, i64, T*))
CONVGRAPH_ISA_DECLARE(template <class T> void col2im_add(const ConvGeometry&, const T*, i64, i64, i64, T*))

template <class T>
void im2col(const ConvGeometry& g, const T* x, i64 channels, i64 p_begin, i64 p_end, T* col) {
  CONVGRAPH_ISA_CALL(im2col<T>, g, x, channels, p_begin, p_end, col);
}

template <class T>
void col2im_add(const ConvGeometry& g, const T* col, i64 channels, i64 p_begin, i64 p_end, T* x) {
  CONVGRAPH_ISA_CALL(col2im_add<T>, g, col, channels, p_begin, p_end, x);
}

CONVGRAPH_ISA_DECLARE(void im2col_pack(const ConvGeometry&, const float*, i64, i64, i64, i64, int, float*))
CONVGRAPH_ISA_DECLARE(void im2col_pack_t(const ConvGeometry&, const float*, i64, i64, i64, i64, int, float*))

void im2col_pack(const ConvGeometry& g, const float* x, i64 r0, i64 kc, i64 p0, i64 n, int nr, float* dst) {
  CONVGRAPH_ISA_CALL(im2col_pack, g, x, r0, kc, p0, n, nr, dst);
}

void im2col_pack_t(const ConvGeometry& g, const float* x, i64 p0, i64 kc, i64 r0, i64 n, int nr, float* dst) {
  CONVGRAPH_ISA_CALL(im2col_pack_t, g, x, p0, kc, r0, n, nr, dst);
}

template void im2col<float>(const ConvGeometry&, const float*, i64, i64, i64, float*);
template void im2col<double>(const ConvGeometry&, const double*, i64, i64, i64, double*);
template void col2im_add<float>(const ConvGeometry&, const float*, i64, i64, i64, float*);
template void col2im_add<double>(const ConvGeometry&, const double*, i64, i64, i64, double*);

}  // namespace convgraph::cpu
