#pragma once
// Private: the op key that names an op's kernel family in the KernelRegistry
// (include/convgraph/backends/kernel_registry.hpp). An op whose kernels are registered per
// device derives from KernelKeyed as well as Op; the runtime then runs the kernel
// registered for (key, device) instead of Op::perform(), and device placement asks the
// registry whether that device has one. Ops without a key keep perform() as their kernel.
#include <string>

#include "convgraph/core/graph.hpp"

namespace convgraph::detail {

class KernelKeyed {
 public:
  virtual ~KernelKeyed() = default;
  /// e.g. "elementwise.unary"; the kernel reads the op's attributes through the op's
  /// private header (ops/elementwise_info.hpp, ops/fused_elementwise.hpp).
  virtual const char* kernel_key() const = 0;
};

/// The op's kernel key, or "" when perform() is its kernel.
inline std::string kernel_key(const Op& op) {
  const auto* k = dynamic_cast<const KernelKeyed*>(&op);
  return k ? k->kernel_key() : "";
}

}  // namespace convgraph::detail
