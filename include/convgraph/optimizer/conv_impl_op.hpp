#pragma once
/// ConvImplOp: a lowered convolution. It computes exactly what its AbstractConvOp says
/// (same operands, same output type) with one ConvAlgorithm, chosen at compile time, or -
/// when shapes are only known at run time - chosen per concrete shape and cached: the
/// first applicable of an ordered candidate list, or (conv_meta) the fastest as timed on
/// the first call with that shape.
#include <functional>
#include <optional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/ops/abstract_conv.hpp"

namespace convgraph {

using AlgorithmPtr = std::shared_ptr<const ConvAlgorithm>;

/// The parts of a forward convolution's fused epilogue (ConvEpilogue), as extra inputs of
/// its ConvImplOp: (x, w[, bias (K,)][, residual shaped like y]).
struct ConvEpilogueSpec {
  bool bias = false;
  bool residual = false;
  ConvActivation activation = ConvActivation::none;
  bool empty() const { return !bias && !residual && activation == ConvActivation::none; }
  /// "+bias+residual+relu" (the parts present), "" when empty.
  std::string text() const;
};

class ConvImplOp : public Op {
 public:
  struct Options {
    bool debug_check = false;  ///< DebugMode: compare every call with reference_conv
    std::size_t workspace_limit = std::numeric_limits<std::size_t>::max();
    std::string node_label;    ///< "#12 AbstractConv 'conv1'": named in run-time errors
    /// Run-time tuning (conv_meta with shapes unknown at compile time): called once per
    /// new concrete problem, under the op's lock, to time the candidates on it. Returns
    /// the winner and sets `why`, or nullptr: then the first applicable candidate runs.
    std::function<AlgorithmPtr(const ConvProblem& p, std::string& why)> tune;
    /// Set: without tuning, run the applicable candidate this machine model estimates
    /// fastest (cheapest_algorithm); unset: the first applicable one (priority order).
    std::optional<MachineModel> cost_model;
  };

  /// A fixed algorithm; `why` says how it was chosen ("priority: ...", "timing: ...").
  ConvImplOp(std::shared_ptr<const AbstractConvOp> abstract, AlgorithmPtr algorithm, std::string why,
             Options options);
  /// Chosen per concrete shape at run time from `candidates` (priority order).
  ConvImplOp(std::shared_ptr<const AbstractConvOp> abstract, std::vector<AlgorithmPtr> candidates,
             std::string why, Options options);

  /// The same lowered convolution (forward only) also applying `epilogue` to its output.
  std::shared_ptr<const ConvImplOp> with_epilogue(ConvEpilogueSpec epilogue) const;
  const ConvEpilogueSpec& epilogue() const { return epilogue_; }

  const AbstractConvOp& abstract() const { return *abstract_; }
  /// True when its (fixed or first candidate) algorithm runs on `device`.
  bool has_device_kernel(DeviceKind device, const std::vector<TensorType>&) const override {
    const ConvAlgorithm* a = fixed_ ? fixed_.get() : candidates_.empty() ? nullptr : candidates_.front().get();
    return a && a->device() == device;
  }
  ConvDirection direction() const { return abstract_->direction(); }
  const ConvParams& conv_params() const { return abstract_->conv_params(); }
  /// The compile-time choice, or nullptr when the choice is made per shape at run time.
  const ConvAlgorithm* algorithm() const { return fixed_.get(); }
  /// Run-time candidates in priority order (empty for a fixed algorithm).
  const std::vector<AlgorithmPtr>& candidates() const { return candidates_; }
  const Options& options() const { return options_; }
  const std::string& why() const { return why_; }

  /// The concrete problem for concrete input types, with the workspace limit applied.
  ConvProblem problem(const std::vector<TensorType>& inputs) const;
  /// The algorithm for `p`: the fixed one, or the one chosen for p's shape (cached per
  /// problem: Options::tune's winner, else the first applicable candidate). Thread-safe:
  /// a new shape is chosen once, concurrent callers wait for it. Throws RuntimeError
  /// listing each candidate's reason when none applies.
  const ConvAlgorithm& select(const ConvProblem& p) const;

  /// "Conv", "ConvGradInputs", "ConvGradWeights"; a fused epilogue adds its parts, e.g.
  /// "Conv+bias+relu".
  std::string name() const override;
  std::string params() const override;  ///< "algo=cpu.corrmm " + the abstract parameters
  TensorType infer(const std::vector<TensorType>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, Tensor& output, const ExecContext& ctx) const override;
  std::size_t workspace_bytes(const std::vector<TensorType>& inputs) const override;
  std::string implementation() const override;  ///< "cpu.corrmm (priority: ...)"
  std::vector<std::string> tags() const override;  ///< the algorithm's tags

 private:
  std::size_t epilogue_inputs() const;  ///< bias and residual inputs after x and w
  /// The convolution's own operand types (inputs without the epilogue's).
  std::vector<TensorType> operands(const std::vector<TensorType>& inputs) const;

  std::shared_ptr<const AbstractConvOp> abstract_;
  AlgorithmPtr fixed_;
  std::vector<AlgorithmPtr> candidates_;
  std::string why_;
  Options options_;
  ConvEpilogueSpec epilogue_;
  mutable std::mutex mu_;
  struct Choice {
    AlgorithmPtr algorithm;
    std::string why;  ///< empty for "first applicable"
  };
  mutable std::map<std::string, Choice> chosen_;  ///< problem key -> algorithm
};

/// The ConvImplOp behind `v`, or nullptr.
const ConvImplOp* as_conv_impl(const Var& v);

/// The three operands of a convolution call: maps the op's inputs and output to x, w, y
/// by direction (forward (x, w) -> y; grad_inputs (w, dy) -> dx; grad_weights (x, dy) -> dw).
ConvTensors conv_tensors(ConvDirection d, const void* in0, const void* in1, void* out);

/// Largest deviation of `got` from `want` (n elements of `dtype`, host memory), judged
/// against the tolerance DebugMode and the meta-optimizer use: relative to the largest
/// finite |want|, 1e-9 for float64, 1e-3 for float32, 1e-2 for 16-bit floats. NaN and
/// infinities must be exactly where `want` has them (NaN for NaN, inf of the same sign);
/// any other NaN or inf fails (`special`, with its index).
struct ConvCheck {
  bool ok = true;
  bool special = false;      ///< failed on a NaN/inf that the reference does not have there
  double max_error = 0;      ///< largest |got - want| over finite elements (NaN if `special`)
  double scale = 0;          ///< largest finite |want|
  double tolerance = 0;      ///< allowed max_error
  std::int64_t index = -1;   ///< where max_error occurs
  double got = 0, want = 0;  ///< the values there
  std::string to_string() const;
};
ConvCheck compare_conv_results(const void* got, const void* want, std::int64_t n, DType dtype);
double conv_relative_tolerance(DType dtype);

}  // namespace convgraph
