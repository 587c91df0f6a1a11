#include "convgraph/runtime/gradcheck.hpp"

#include <cmath>
#include <random>

#include "convgraph/ops/autodiff.hpp"
#include "convgraph/ops/math.hpp"
#include "convgraph/runtime/function.hpp"

namespace convgraph {

void verify_grad(const std::function<Var(const std::vector<Var>&)>& fn, const std::vector<Tensor>& points,
                 const VerifyGradOptions& options) {
  std::vector<Var> inputs;
  std::vector<Tensor> x;
  for (std::size_t i = 0; i < points.size(); ++i) {
    inputs.push_back(input(DType::float64, points[i].shape(), "x" + std::to_string(i)));
    x.push_back(points[i].astype(DType::float64).clone());
  }
  const Var out = fn(inputs);
  if (!out.defined()) throw ValueError("verify_grad: fn returned an undefined variable");
  const Var outf = cast(out, DType::float64);
  // A fixed random projection turns any output into a scalar cost.
  const Function probe = compile(inputs, {outf}, options.mode);
  const Tensor y0 = probe(x)[0];
  std::mt19937 rng(options.seed);
  std::uniform_real_distribution<double> uni(0.5, 1.5);
  Tensor proj(DType::float64, y0.shape());
  for (std::int64_t i = 0; i < proj.numel(); ++i) proj.set(i, uni(rng) * (rng() % 2 ? 1.0 : -1.0));
  const Var cost = sum(outf * constant(proj, "projection"));
  const std::vector<Var> grads = grad(cost, inputs, Disconnected::zero);
  std::vector<Var> outs{cost};
  outs.insert(outs.end(), grads.begin(), grads.end());
  const Function f = compile(inputs, outs, options.mode);
  const std::vector<Tensor> analytic = f(x);
  const Function cost_only = compile(inputs, {cost}, options.mode);

  bool any_nonzero = false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (std::int64_t e = 0; e < x[i].numel(); ++e) {
      const double orig = x[i].get(e);
      x[i].set(e, orig + options.eps);
      const double plus = cost_only(x)[0].get(0);
      x[i].set(e, orig - options.eps);
      const double minus = cost_only(x)[0].get(0);
      x[i].set(e, orig);
      const double numeric = (plus - minus) / (2 * options.eps);
      const double sym = analytic[i + 1].get(e);
      any_nonzero = any_nonzero || sym != 0.0;
      const double err = std::abs(numeric - sym);
      if (!(err <= options.abs_tol + options.rel_tol * std::max(std::abs(numeric), std::abs(sym))))
        throw MismatchError(msg("verify_grad: gradient of input ", i, " ", shape_to_string(x[i].shape()),
                                " at element ", e, ": symbolic ", sym, ", finite difference ", numeric,
                                " (abs error ", err, ")"));
    }
  }
  bool any_input = false;
  for (const auto& t : x) any_input = any_input || t.numel() > 0;
  if (any_input && !any_nonzero)
    throw MismatchError("verify_grad: every gradient is exactly zero; the check would be vacuous");
}

}  // namespace convgraph
