#include "convgraph/core/shared.hpp"

namespace convgraph {

namespace {
std::string label(const Var& v) {
  return v.name().empty() ? msg("shared variable #", v.node()->id) : msg("shared variable '", v.name(), "'");
}
}  // namespace

SharedVar::SharedVar(Var v) : Var(std::move(v)) {
  if (!is_shared())
    throw ValueError(msg("SharedVar: ", defined() ? "'" + name() + "' is not a shared variable" : "the variable is undefined",
                         "; create one with shared(tensor, name)"));
}

SharedSlot& SharedVar::slot() const {
  if (!is_shared()) throw ValueError("SharedVar: the variable is undefined (default-constructed)");
  return *node()->shared;
}

Tensor SharedVar::get_value(bool borrow) const {
  SharedSlot& s = slot();
  std::lock_guard<std::mutex> lock(s.mu);
  return borrow ? s.value : s.value.clone();
}

void SharedVar::set_value(const Tensor& value, bool borrow) {
  SharedSlot& s = slot();
  if (!value.defined()) throw ValueError(msg(label(*this), ": set_value: the tensor is undefined"));
  const TensorType& want = type();
  const std::string got = TensorType{value.dtype(), value.shape(), value.device()}.to_string();
  if (value.dtype() != want.dtype || value.device() != want.device)
    throw TypeError(msg(label(*this), ": set_value: the value is ", got, " but the variable is ", want.to_string()));
  if (value.shape() != want.shape)
    throw ShapeError(msg(label(*this), ": set_value: the value is ", got, " but the variable is ", want.to_string()));
  // Copy outside the lock: a running call is not held up by the copy.
  Tensor held = borrow && value.is_contiguous() ? value : value.clone();
  std::lock_guard<std::mutex> lock(s.mu);
  s.value = std::move(held);
}

SharedVar shared(const Tensor& value, std::string name) {
  if (!value.defined()) throw ValueError(msg("shared '", name, "': the tensor is undefined"));
  // Host only for now: a function on the GPU uploads the value where its nodes read it.
  if (value.device() != DeviceKind::cpu)
    throw ValueError(msg("shared '", name, "': the tensor lives on ", device_name(value.device()),
                         "; shared variables hold host tensors"));
  // input() gives the node its id and checks the shape; the slot makes it shared.
  Var v = input(value.dtype(), value.shape(), std::move(name));
  v.node()->shared = std::make_shared<SharedSlot>();
  v.node()->shared->value = value.clone();
  return SharedVar(std::move(v));
}

}  // namespace convgraph
