#pragma once
/// Shared variables (Theano's `shared`): graph leaves whose value lives between calls. A
/// compiled Function reads a shared variable's value at each call (it is an implicit
/// input, never passed as an argument) and its updates replace the value after the call;
/// C++ code reads and writes it with get_value / set_value.
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

/// The value cell of a shared variable, held by its node (and by every FunctionGraph
/// clone of that node, so all compiled functions using the variable see one value).
/// `mu` guards `value`: get_value/set_value take it briefly, and a Function call holds
/// it for the whole call (runtime/function.cpp).
struct SharedSlot {
  mutable std::mutex mu;
  Tensor value;  ///< contiguous; dtype, shape and device fixed by the variable's type
};

/// A Var that is a shared variable. Converts to Var implicitly (it is one), so it goes
/// anywhere a Var does: into ops, grad(), outputs.
class SharedVar : public Var {
 public:
  SharedVar() = default;
  /// Wraps `v`, which must be a shared variable (ValueError otherwise).
  explicit SharedVar(Var v);

  /// The current value: a copy, or with borrow=true the held tensor itself, which later
  /// calls may overwrite in place (updates) or replace.
  Tensor get_value(bool borrow = false) const;
  /// Replaces the value. Its dtype, shape and device must equal the variable's type
  /// (TypeError/ShapeError naming the variable and both types). The tensor is copied,
  /// unless borrow=true and it is contiguous: then the variable holds it, and calls may
  /// write into it.
  void set_value(const Tensor& value, bool borrow = false);

 private:
  SharedSlot& slot() const;
};

/// A new shared variable holding a copy of `value` (made contiguous); its type is the
/// value's dtype and shape. Values live on the host (with device=cuda a function uploads
/// them where GPU nodes read them): ValueError for a device tensor or an undefined one.
SharedVar shared(const Tensor& value, std::string name = {});

/// Updates for compile(): each shared variable and the expression of its value after the
/// call (all computed from the values before the call, so {a: b, b: a} swaps).
using Updates = std::vector<std::pair<SharedVar, Var>>;

}  // namespace convgraph
