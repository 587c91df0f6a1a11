#pragma once
// Private to the batch-norm ops (ops/batch_norm.cpp) and their CPU kernels
// (backends/cpu/batch_norm_kernels.cpp): which op a node is and its attributes.
//
// Inputs and outputs (C = channels, "stats" = the (3, C) output of batch_norm_stats):
//   stats       (x)                                   -> (3, C): mean, biased var, unbiased var
//   forward     train: (x, gamma, beta, stats)        -> like x
//               infer: (x, gamma, beta, mean, var)
//   grad_sums   train: (x, gy, stats)                 -> (2, C): sum(gy), sum(gy * xhat)
//               infer: (x, gy, mean, var)
//   grad_x      (x, gy, gamma, stats, sums)            -> like x (training only)
// With relu set, the training gradients take one more input, h (like x), and use
// where(h > 0, gy, 0) for gy: relu's gradient in their passes (optimizer/grad_fusion.cpp).
#include "convgraph/core/graph.hpp"

namespace convgraph::detail {

enum class BnKind { stats, forward, grad_sums, grad_x };

struct BnInfo {
  BnKind kind = BnKind::stats;
  bool train = true;  ///< statistics from a stats tensor (train) or two vectors (infer)
  double eps = 1e-5;
  bool relu = false;  ///< forward: relu applied to the output (optimizer/conv_epilogue_fusion.cpp);
                      ///< grad_sums, grad_x: gy masked by a trailing input h > 0 (optimizer/grad_fusion.cpp)
};

/// The attributes of a batch-norm op (kernel keys "batch_norm_stats", "batch_norm",
/// "batch_norm_grad_sums", "batch_norm_grad_x").
BnInfo bn_info(const Op& op);

/// The forward op of `info` (with its relu flag) on the inputs of an unfused forward node.
Var batch_norm_forward(const BnInfo& info, std::vector<Var> inputs);
/// The batch-norm op of `info` (any kind) on `inputs`.
Var batch_norm_node(const BnInfo& info, std::vector<Var> inputs);

}  // namespace convgraph::detail
