#include "convgraph/backends/kernel_registry.hpp"

namespace convgraph {

void KernelRegistry::add(std::string key, DeviceKind device, OpKernel kernel) {
  if (key.empty() || !kernel.run) throw ValueError("KernelRegistry: a kernel needs a key and a run function");
  if (find(key, device) != nullptr)
    throw ValueError(msg("KernelRegistry: a ", device_name(device), " kernel for '", key, "' is already registered"));
  kernels_.emplace(std::make_pair(std::move(key), device), std::move(kernel));
}

const OpKernel* KernelRegistry::find(std::string_view key, DeviceKind device) const {
  for (const auto& [k, kernel] : kernels_)  // a few dozen entries, looked up at compile time
    if (k.first == key && k.second == device) return &kernel;
  return nullptr;
}

Status KernelRegistry::supported(const Op& op, DeviceKind device, const std::vector<TensorType>& inputs) const {
  const std::string_view key = op.kernel_key();
  if (key.empty()) {
    if (device == DeviceKind::cpu || op.has_device_kernel(device, inputs)) return Status::ok();
    return Status::no(msg(op.label(), " has no ", device_name(device), " kernel"));
  }
  const OpKernel* k = find(key, device);
  if (!k) return Status::no(msg("no ", device_name(device), " kernel is registered for '", key, "'"));
  return k->supports ? k->supports(op, inputs) : Status::ok();
}

void KernelRegistry::run(const Op& op, const std::vector<Tensor>& inputs, Tensor& output, const ExecContext& ctx) const {
  const std::string_view key = op.kernel_key();
  if (key.empty()) return op.perform(inputs, output, ctx);
  const OpKernel* k = find(key, output.device());
  if (!k)
    throw DeviceError(msg(op.label(), ": no ", device_name(output.device()), " kernel is registered for '", key, "'"));
  k->run(op, inputs, output, ctx);
}

const KernelRegistry& KernelRegistry::builtin() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_cpu_kernels(r);
    register_cuda_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace convgraph
