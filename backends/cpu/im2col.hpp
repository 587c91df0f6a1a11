#pragma once
// Private to backends/cpu: N-d im2col / col2im (one code path for 1D/2D/3D, dilation,
// stride, asymmetric padding, filter flip).
//
// Column matrix layout for `channels` input channels and the flattened output positions
// [p_begin, p_end): row-major, (channels * ker_numel) rows by (p_end - p_begin) columns.
// Row r = (q * ker0 + w0) * ker1 + w1) * ker2 + w2 corresponds to filter element
// w[., q, w0, w1, w2] as *stored*; with flip the row holds the input under the mirrored
// tap, so a plain GEMM with the stored filter computes a true convolution (no filter copy).
#include "backends/cpu/conv_geometry.hpp"

namespace convgraph::cpu {

/// Writes every element of col (zeros where the tap reads padding). x points at the first
/// of `channels` consecutive input channel planes of one image.
template <class T>
void im2col(const ConvGeometry& g, const T* x, i64 channels, i64 p_begin, i64 p_end, T* col);

/// The adjoint of im2col: adds each column entry into the input position it was read from
/// (entries that came from padding are dropped). x must already hold the values to add to.
template <class T>
void col2im_add(const ConvGeometry& g, const T* col, i64 channels, i64 p_begin, i64 p_end, T* x);

/// im2col straight into a GEMM's packed B panel (sgemm.hpp, PanelSource): rows r0..r0+kc of
/// the column matrix (depth) by positions p0..p0+n, nr positions per sliver (sliver q at
/// dst + q*kc*nr, entry (k, j) at [k*nr + j], zeros past n). x as for im2col.
void im2col_pack(const ConvGeometry& g, const float* x, i64 r0, i64 kc, i64 p0, i64 n, int nr, float* dst);
/// The transpose, for grad weights: positions p0..p0+kc (depth) by rows r0..r0+n.
void im2col_pack_t(const ConvGeometry& g, const float* x, i64 p0, i64 kc, i64 r0, i64 n, int nr, float* dst);

// Defined for float and double (im2col.cpp: the active CPU level's kernels/im2col.cpp).

}  // namespace convgraph::cpu
