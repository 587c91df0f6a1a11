// SGD and Adam as graph expressions over shared state (include/convgraph/ops/updates.hpp).
#include "convgraph/ops/updates.hpp"

#include <cmath>

#include "convgraph/ops/math.hpp"

namespace convgraph {

namespace {

std::string param_label(std::size_t i, const Var& p) {
  return msg("params[", i, "]", p.defined() && !p.name().empty() ? " ('" + p.name() + "')" : "");
}

// lo <= value (< hi, or <= hi when closed), finite.
void check_range(const char* builder, const char* option, double value, double lo, double hi, bool lo_open, bool hi_open) {
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
  if (ok) return;
  throw ValueError(msg(builder, ": ", option, " = ", value, " is out of range; it must be in ", lo_open ? "(" : "[", lo,
                       ", ", std::isinf(hi) ? "inf" : msg(hi), hi_open ? ")" : "]"));
}

void check_pairs(const char* builder, const std::vector<SharedVar>& params, const std::vector<Var>& grads) {
  if (params.size() != grads.size())
    throw ValueError(msg(builder, ": got ", params.size(), " parameter(s) but ", grads.size(), " gradient(s)"));
  for (std::size_t i = 0; i < params.size(); ++i) {
    const SharedVar& p = params[i];
    if (!p.is_shared()) throw ValueError(msg(builder, ": ", param_label(i, p), " is undefined"));
    if (!grads[i].defined()) throw ValueError(msg(builder, ": the gradient of ", param_label(i, p), " is undefined"));
    if (!is_float(p.dtype()))
      throw TypeError(msg(builder, ": ", param_label(i, p), " is ", p.type().to_string(), "; parameters must be float"));
    const TensorType& g = grads[i].type();
    if (g.dtype != p.dtype())
      throw TypeError(msg(builder, ": the gradient of ", param_label(i, p), " is ", g.to_string(), " but the parameter is ",
                          p.type().to_string()));
    if (!p.type().accepts(g))
      throw ShapeError(msg(builder, ": the gradient of ", param_label(i, p), " is ", g.to_string(),
                           " but the parameter is ", p.type().to_string()));
    for (std::size_t j = 0; j < i; ++j)
      if (params[j].same(p)) throw ValueError(msg(builder, ": ", param_label(i, p), " is also params[", j, "]"));
  }
}

std::string state_name(const Var& p, const char* what) { return (p.name().empty() ? "param" : p.name()) + "." + what; }

SharedVar zeros_state(const Var& p, const char* what) {
  return shared(Tensor::zeros(p.dtype(), p.shape()), state_name(p, what));
}

}  // namespace

Updates sgd(const std::vector<SharedVar>& params, const std::vector<Var>& grads, const SgdOptions& o) {
  const double inf = INFINITY;
  check_range("sgd", "lr", o.lr, 0, inf, true, true);
  check_range("sgd", "momentum", o.momentum, 0, 1, false, true);
  check_range("sgd", "weight_decay", o.weight_decay, 0, inf, false, true);
  if (o.nesterov && o.momentum == 0) throw ValueError("sgd: nesterov = true needs momentum > 0 (momentum = 0)");
  check_pairs("sgd", params, grads);
  Updates updates;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const SharedVar& p = params[i];
    Var g = o.weight_decay != 0 ? grads[i] + p * o.weight_decay : grads[i];
    if (o.momentum != 0) {
      SharedVar buf = zeros_state(p, "momentum_buffer");
      Var b = buf * o.momentum + g;
      updates.emplace_back(buf, b);
      g = o.nesterov ? g + b * o.momentum : b;
    }
    updates.emplace_back(p, p - g * o.lr);
  }
  return updates;
}

Updates adam(const std::vector<SharedVar>& params, const std::vector<Var>& grads, const AdamOptions& o) {
  const double inf = INFINITY;
  check_range("adam", "lr", o.lr, 0, inf, true, true);
  check_range("adam", "beta1", o.beta1, 0, 1, false, true);
  check_range("adam", "beta2", o.beta2, 0, 1, false, true);
  check_range("adam", "eps", o.eps, 0, inf, true, true);
  check_range("adam", "weight_decay", o.weight_decay, 0, inf, false, true);
  check_pairs("adam", params, grads);
  Updates updates;
  if (params.empty()) return updates;
  SharedVar step = shared(Tensor::scalar(0, DType::float64), "adam.step");
  const Var t = step + 1.0;
  updates.emplace_back(step, t);
  // The bias corrections, once for all parameters, in float64 as PyTorch's Python floats.
  const Var step_size = o.lr / (1.0 - pow(scalar(o.beta1, DType::float64), t));
  const Var bc2_sqrt = sqrt(1.0 - pow(scalar(o.beta2, DType::float64), t));
  for (std::size_t i = 0; i < params.size(); ++i) {
    const SharedVar& p = params[i];
    const Var g = o.weight_decay != 0 ? grads[i] + p * o.weight_decay : grads[i];
    SharedVar m = zeros_state(p, "exp_avg"), v = zeros_state(p, "exp_avg_sq");
    const Var m_new = m * o.beta1 + g * (1 - o.beta1);
    const Var v_new = v * o.beta2 + g * g * (1 - o.beta2);
    updates.emplace_back(m, m_new);
    updates.emplace_back(v, v_new);
    const Var denom = sqrt(v_new) / cast(bc2_sqrt, p.dtype()) + o.eps;
    updates.emplace_back(p, p - cast(step_size, p.dtype()) * (m_new / denom));
  }
  return updates;
}

}  // namespace convgraph
