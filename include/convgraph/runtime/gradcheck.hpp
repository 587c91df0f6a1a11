#pragma once
/// verify_grad: checks symbolic gradients against central finite differences in
/// float64, through a random projection of the outputs (as pytensor's verify_grad).
#include <functional>
#include <vector>

#include "convgraph/core/graph.hpp"
#include "convgraph/optimizer/mode.hpp"

namespace convgraph {

struct VerifyGradOptions {
  double eps = 1e-6;           ///< finite-difference step
  double abs_tol = 1e-6;
  double rel_tol = 1e-5;
  unsigned seed = 1234;        ///< random projection
  Mode mode = Mode::fast_run();
};

/// Builds fn on float64 inputs shaped like `points`, projects its output onto a random
/// tensor, and compares the symbolic gradient with central differences at `points`
/// (converted to float64). Throws MismatchError naming the input, element, both values.
/// Also fails when every gradient is zero (a test that cannot fail).
void verify_grad(const std::function<Var(const std::vector<Var>&)>& fn, const std::vector<Tensor>& points,
                 const VerifyGradOptions& options = {});

}  // namespace convgraph
