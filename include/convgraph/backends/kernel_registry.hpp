#pragma once
/// The kernels of the non-convolution ops (elementwise, reductions, softmax, matmul,
/// pooling, ...), one per (op key, device), registered explicitly by register_cpu_kernels()
/// and register_cuda_kernels() as the convolution algorithms are in their
/// AlgorithmRegistry. An op says what it computes (type inference, gradient) and names its
/// kernel family with Op::kernel_key(); it never names a device or a backend. Device
/// placement asks supported(), the runtime and constant folding call run().
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "convgraph/core/error.hpp"
#include "convgraph/core/graph.hpp"

namespace convgraph {

struct OpKernel {
  /// ok, or why this kernel cannot run the op with these input types (for example a dtype
  /// it lacks). Unset: always ok.
  std::function<Status(const Op& op, const std::vector<TensorType>& inputs)> supports;
  /// Computes `output` (preallocated, contiguous, on the kernel's device) from contiguous
  /// inputs on that device.
  std::function<void(const Op& op, const std::vector<Tensor>& inputs, Tensor& output, const ExecContext& ctx)> run;
};

class KernelRegistry {
 public:
  /// Adds the kernel of `key` on `device`; ValueError when one is already registered.
  void add(std::string key, DeviceKind device, OpKernel kernel);
  /// nullptr when none is registered.
  const OpKernel* find(std::string_view key, DeviceKind device) const;
  /// Whether `op` can run on `device` with these input types: ok, or the reason (no kernel
  /// for its key on that device, or the kernel's own refusal). An op without a key answers
  /// through Op::has_device_kernel (host: always ok).
  Status supported(const Op& op, DeviceKind device, const std::vector<TensorType>& inputs) const;
  /// Runs `op` with the kernel for output's device; an op without a key runs its own
  /// perform(). DeviceError (naming the op and the device) when no kernel is registered.
  void run(const Op& op, const std::vector<Tensor>& inputs, Tensor& output, const ExecContext& ctx) const;

  /// The process-wide registry of every built-in kernel (CPU, and CUDA when built).
  static const KernelRegistry& builtin();

 private:
  std::map<std::pair<std::string, DeviceKind>, OpKernel, std::less<>> kernels_;
};

/// Explicit registration (no static initialisers), called by KernelRegistry::builtin().
void register_cpu_kernels(KernelRegistry& r);
void register_cuda_kernels(KernelRegistry& r);  ///< no-op without CUDA

}  // namespace convgraph
