#pragma once
/// The one interface every concrete convolution implements (docs/DESIGN.md, "Implementations"),
/// and the ordered registry the optimizer and the meta-optimizer select from.
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "convgraph/backends/conv_cost.hpp"
#include "convgraph/conv/conv_problem.hpp"
#include "convgraph/core/device.hpp"
#include "convgraph/core/exec_context.hpp"
#include "convgraph/core/error.hpp"

namespace convgraph {

/// The three operands of a convolution, named as in cuDNN. The direction decides which
/// one is written: y for forward, x for grad_inputs (x = dx, y = dy), w for grad_weights
/// (w = dw, y = dy). All are dense row-major in ConvProblem's dtype, on the algorithm's
/// device. The written operand is fully overwritten (never accumulated into).
/// What a forward convolution applies to its output as it writes it (graph fusion, the
/// conv_epilogue rewrite): y = act((y + bias[k]) + residual), each part optional, in that
/// order so the result has the bits of the unfused ops. bias holds K values and residual
/// has y's shape, both dense in y's dtype on y's device. Forward only.
enum class ConvActivation { none, relu };
struct ConvEpilogue {
  const void* bias = nullptr;
  const void* residual = nullptr;
  ConvActivation activation = ConvActivation::none;
  bool empty() const { return !bias && !residual && activation == ConvActivation::none; }
};

struct ConvTensors {
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  ConvEpilogue epilogue;  ///< forward only; see ConvAlgorithm::fuses_epilogue()
};

/// Where and with what an algorithm runs: the execution context of every kernel, with a
/// workspace of at least workspace_bytes(problem) bytes.
using ConvContext = ExecContext;

class ConvAlgorithm {
 public:
  virtual ~ConvAlgorithm() = default;
  /// Unique name, e.g. "cpu.corrmm", "cuda.cudnn.fwd.implicit_precomp_gemm".
  virtual std::string name() const = 0;
  virtual DeviceKind device() const = 0;
  /// Tags that flags select on, e.g. {"conv_gemm", "fast_run", "fast_compile"}.
  virtual std::vector<std::string> tags() const = 0;
  /// Cheap check: ok, or why this algorithm does not handle the problem.
  virtual Status applicable(const ConvProblem& p) const = 0;
  /// Scratch memory run() needs, honouring p.workspace_limit where the algorithm can chunk.
  virtual std::size_t workspace_bytes(const ConvProblem& p) const { (void)p; return 0; }
  /// Computes the direction's output. Must not allocate more than small bookkeeping.
  virtual void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const = 0;
  /// True when run() applies t.epilogue itself, to each block of y while it is in cache;
  /// otherwise its caller applies the epilogue in one pass after run().
  virtual bool fuses_epilogue() const { return false; }
  /// Bumped when results or speed change, so tuning-cache entries are invalidated.
  virtual int version() const { return 1; }
  /// The cost model's estimate of run()'s time on `machine`, in seconds, from the
  /// problem's arithmetic, the algorithm's transform and packing traffic and its typical
  /// efficiency (backends/conv_cost.hpp); +inf when the algorithm has no model. Priority
  /// lowering picks the cheapest usable algorithm by it (fast_run without tuning).
  virtual double estimated_seconds(const ConvProblem& p, const MachineModel& machine) const {
    (void)p, (void)machine;
    return std::numeric_limits<double>::infinity();
  }
};

/// Ordered list of algorithms; order is default priority, best first (oneDNN's impl list).
class AlgorithmRegistry {
 public:
  /// Adds an algorithm; throws ValueError when the name is already registered.
  void add(std::shared_ptr<const ConvAlgorithm> algo);
  const std::vector<std::shared_ptr<const ConvAlgorithm>>& all() const { return algos_; }
  /// nullptr when unknown.
  const ConvAlgorithm* find(std::string_view name) const;
  /// The process-wide registry holding every built-in algorithm (CPU, and CUDA when built).
  static const AlgorithmRegistry& builtin();

 private:
  std::vector<std::shared_ptr<const ConvAlgorithm>> algos_;
};

/// Explicit registration (no static initialisers), called by AlgorithmRegistry::builtin()
/// (backends/algorithm_registry.cpp): CPU first, then CUDA. The order of the lines in
/// backends/cpu/register_cpu.cpp and backends/cuda/register_cuda.cpp is the priority order.
void register_cpu_conv_algorithms(AlgorithmRegistry& r);
void register_cuda_conv_algorithms(AlgorithmRegistry& r);  ///< no-op without CUDA

}  // namespace convgraph
