#pragma once
/// Max and average pooling over the trailing 1, 2 or 3 axes (one op for every rank),
/// their gradient ops, and global average pooling. CPU kernels (pooling runs on the host).
#include <cstdint>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

/// Pooling options, one entry per pooled axis (the window's length says how many trailing
/// axes are pooled: 1, 2 or 3; stride and padding have the same length or are empty).
struct PoolOptions {
  std::vector<std::int64_t> window{2, 2};
  std::vector<std::int64_t> stride;   ///< empty = window
  std::vector<std::int64_t> padding;  ///< empty = no padding
  bool ignore_border = true;          ///< Theano: true drops partial windows
  bool include_padding_in_average = false;
};

/// Pooling over the last d = options.window.size() axes (1 <= d <= 3) of a tensor of rank
/// >= d; leading axes (batch, channels, ...) are independent. Output length per pooled axis
/// (Theano's rule): ignore_border: (n + 2 pad - window) / stride + 1; otherwise partial
/// windows at the end are kept. Padding must be smaller than the window and needs
/// ignore_border. The average divides by the window clipped to the input, or to the padded
/// input with include_padding_in_average. max pooling also accepts int32/int64; NaN wins.
/// The op is named max_pool<d>d / avg_pool<d>d. ValueError for bad options (naming the op,
/// the option and its values), ShapeError for a too-small input or rank, TypeError for a
/// dtype.
Var max_pool(const Var& x, const PoolOptions& options);
Var avg_pool(const Var& x, const PoolOptions& options);

/// Default options of the 1-D, 2-D and 3-D forms: window 2 along each pooled axis.
inline const PoolOptions kPool1d{{2}, {}, {}, true, false};
inline const PoolOptions kPool2d{{2, 2}, {}, {}, true, false};
inline const PoolOptions kPool3d{{2, 2, 2}, {}, {}, true, false};

/// The same with the number of pooled axes fixed (the window must have that many entries).
Var max_pool1d(const Var& x, const PoolOptions& options = kPool1d);
Var avg_pool1d(const Var& x, const PoolOptions& options = kPool1d);
Var max_pool2d(const Var& x, const PoolOptions& options = kPool2d);
Var avg_pool2d(const Var& x, const PoolOptions& options = kPool2d);
Var max_pool3d(const Var& x, const PoolOptions& options = kPool3d);
Var avg_pool3d(const Var& x, const PoolOptions& options = kPool3d);

/// The pooling gradients as ops: gx from the pooled output's gradient gy (any rank, as
/// max_pool/avg_pool). max routes each gy to its window's first maximum of x (row-major
/// order; a NaN counts as the maximum); avg spreads gy over the window (x only gives the
/// shape). Both are differentiable: max_pool_grad's adjoint is max_pool_grad_grad, a
/// gather of g (shaped like x) at each window's argmax, pooled-shaped.
Var max_pool_grad(const Var& x, const Var& gy, const PoolOptions& options);
Var avg_pool_grad(const Var& x, const Var& gy, const PoolOptions& options);
Var max_pool_grad_grad(const Var& x, const Var& g, const PoolOptions& options);
Var max_pool2d_grad(const Var& x, const Var& gy, const PoolOptions& options = kPool2d);
Var avg_pool2d_grad(const Var& x, const Var& gy, const PoolOptions& options = kPool2d);

/// Mean over every axis after the first two: (N, C, ...) -> (N, C), for rank >= 3 float
/// tensors (ShapeError / TypeError otherwise). Its gradient spreads gy / count evenly.
Var global_avg_pool(const Var& x);

}  // namespace convgraph
