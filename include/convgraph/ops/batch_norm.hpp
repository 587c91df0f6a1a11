#pragma once
/// Batch normalization over the channel axis 1 of x shaped (N, C), (N, C, L), (N, C, H, W)
/// or (N, C, D, H, W) (one code path): per channel c, over the M = N * spatial elements,
///   y = (x - mean_c) / sqrt(var_c + eps) * gamma_c + beta_c.
/// x, gamma, beta and the statistics share one float dtype (float32 or float64); gamma,
/// beta and the statistics are vectors of length C. Bad ranks, lengths, dtypes, eps <= 0
/// and momentum outside [0, 1] raise ShapeError / TypeError / ValueError naming the op, the
/// argument and the values.
#include "convgraph/core/graph.hpp"

namespace convgraph {

/// What batch_norm_train gives: y, and the batch statistics per channel for the running
/// averages (as PyTorch: the mean, and the unbiased variance sum((x - mean)^2) / (M - 1)).
struct BatchNormOutputs {
  Var y;
  Var mean;  ///< (C,)
  Var var;   ///< (C,), unbiased
};

/// Training mode: normalises with the batch mean and the biased variance (divided by M;
/// M >= 2 is required, as for the unbiased variance). The statistics are computed in one
/// pass over x (shifted sums) and y in a second. The gradients are fused ops: a
/// per-channel reduction giving dbeta = sum(gy) and dgamma = sum(gy * xhat) in one pass
/// over (x, gy), and dx = gamma / sigma * (gy - (dbeta + xhat * dgamma) / M) in a second,
/// with xhat = (x - mean) / sigma, sigma = sqrt(var + eps).
BatchNormOutputs batch_norm_train(const Var& x, const Var& gamma, const Var& beta, double eps = 1e-5);

/// The running averages after a training step (PyTorch's semantics):
///   running_mean_new = (1 - momentum) running_mean + momentum mean
///   running_var_new  = (1 - momentum) running_var  + momentum var (unbiased)
/// as expressions to pair with the running statistics in a Function's updates.
struct RunningStats {
  Var mean;
  Var var;
};
RunningStats batch_norm_running_update(const BatchNormOutputs& batch, const Var& running_mean,
                                       const Var& running_var, double momentum = 0.1);

/// Inference mode: normalises with given (running) statistics. Differentiable in every
/// argument; dgamma and dbeta use the same fused reduction as training.
Var batch_norm_infer(const Var& x, const Var& gamma, const Var& beta, const Var& running_mean,
                     const Var& running_var, double eps = 1e-5);

}  // namespace convgraph
