#pragma once
/// Update builders: the parameter updates of a training step, as compile(..., updates)
/// takes them. Each builder returns one update per parameter plus the updates of the
/// optimizer state it needs, which lives in shared variables it creates (zero-initialised,
/// named after the parameter: "<param>.momentum_buffer", "<param>.exp_avg", ...), so the
/// state persists across calls of the compiled function and can be read with get_value.
///
/// The formulas are PyTorch's (torch.optim.SGD and torch.optim.Adam, single-tensor form),
/// so a run with the same hyper-parameters and data follows the same trajectory up to
/// rounding.
#include <vector>

#include "convgraph/core/shared.hpp"

namespace convgraph {

struct SgdOptions {
  double lr = 0;             ///< learning rate, required (> 0)
  double momentum = 0;       ///< 0 <= momentum < 1; 0 keeps no state
  bool nesterov = false;     ///< Nesterov momentum (needs momentum > 0)
  double weight_decay = 0;   ///< L2 penalty (>= 0), added to the gradient
};

/// Stochastic gradient descent, as torch.optim.SGD with dampening 0. Per parameter p with
/// gradient g:
///   g' = g + weight_decay * p
///   with momentum: b = momentum * b + g' (b starts at 0, so the first step gives b = g'),
///                  g' = nesterov ? g' + momentum * b : b
///   p = p - lr * g'
/// `params` and `grads` must have equal lengths, each gradient the dtype and shape of its
/// parameter, no parameter twice; bad options or arguments raise ValueError/TypeError/
/// ShapeError naming "sgd", the argument and the value.
Updates sgd(const std::vector<SharedVar>& params, const std::vector<Var>& grads, const SgdOptions& options);

struct AdamOptions {
  double lr = 1e-3;          ///< > 0
  double beta1 = 0.9;        ///< 0 <= beta1 < 1
  double beta2 = 0.999;      ///< 0 <= beta2 < 1
  double eps = 1e-8;         ///< > 0
  double weight_decay = 0;   ///< L2 penalty (>= 0), added to the gradient (Adam, not AdamW)
};

/// Adam, as torch.optim.Adam (amsgrad off). A float64 step count t (shared, "adam.step",
/// starting at 0) is shared by all parameters; per parameter p with gradient g:
///   t = t + 1
///   g' = g + weight_decay * p
///   m = beta1 * m + (1 - beta1) * g'        ("<param>.exp_avg")
///   v = beta2 * v + (1 - beta2) * g'^2      ("<param>.exp_avg_sq")
///   p = p - lr / (1 - beta1^t) * (m / (sqrt(v) / sqrt(1 - beta2^t) + eps))
/// The bias corrections are computed in float64. Same argument checks as sgd().
Updates adam(const std::vector<SharedVar>& params, const std::vector<Var>& grads,
             const AdamOptions& options = {});

}  // namespace convgraph
