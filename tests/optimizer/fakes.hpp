#pragma once
// Test doubles for the optimizer tests: a clock the test drives, and convolution
// algorithms whose speed (on that clock), correctness and applicability the test decides.
#include <convgraph/backends/conv_algorithm.hpp>
#include <convgraph/backends/cpu/reference.hpp>
#include <convgraph/backends/cuda.hpp>
#include <convgraph/convgraph.hpp>
#include <convgraph/optimizer/conv_impl_op.hpp>
#include <convgraph/optimizer/meta_optimizer.hpp>
#include <convgraph/optimizer/optimize.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace convgraph::testing {

class FakeClock final : public MetaClock {
 public:
  double now() override { return t_; }
  void advance(double s) { t_ += s; }

 private:
  double t_ = 1000;
};

/// Computes the right answer with the reference (unless `wrong`), and "takes" `cost`
/// seconds on the fake clock.
class FakeAlgorithm final : public ConvAlgorithm {
 public:
  FakeAlgorithm(std::string name, std::vector<std::string> tags, double cost,
                std::shared_ptr<FakeClock> clock, bool wrong = false)
      : name_(std::move(name)), tags_(std::move(tags)), cost_(cost), clock_(std::move(clock)), wrong_(wrong) {}

  std::string name() const override { return name_; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return tags_; }
  Status applicable(const ConvProblem& p) const override {
    if (only_stride1 && (p.stride[0] != 1 || p.stride[1] != 1)) return Status::no("stride 2 not supported");
    return Status::ok();
  }
  std::size_t workspace_bytes(const ConvProblem&) const override { return workspace; }
  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext&) const override {
    ++runs;
    if (throws || (throws_after > 0 && runs > throws_after)) throw MemoryError(name_ + ": out of memory (fake)");
    if (loses_context) throw DeviceContextError(name_ + ": an illegal address (fake)");
    reference_conv(p, t);
    if (clobber_input) {  // writes into an operand it must only read
      void* in = p.direction == ConvDirection::forward ? t.x : t.y;
      if (p.dtype == DType::float32) static_cast<float*>(in)[0] += 1.0f;
      else static_cast<double*>(in)[0] += 1.0;
    }
    if (wrong_) {
      void* out = p.direction == ConvDirection::forward ? t.y : p.direction == ConvDirection::grad_inputs ? t.x : t.w;
      if (p.dtype == DType::float32) static_cast<float*>(out)[0] += 0.5f;
      else static_cast<double*>(out)[0] += 0.5;
    }
    if (clock_) clock_->advance(runs > slow_from && runs <= slow_from + slow_runs ? slow_cost : cost_);
  }
  int version() const override { return version_; }

  bool only_stride1 = false;
  bool throws = false;
  bool loses_context = false;  ///< throws DeviceContextError, as after a kernel fault
  bool clobber_input = false;
  std::size_t workspace = 0;
  int throws_after = 0;    ///< > 0: runs after the first throws_after throw, as `throws`
  int slow_runs = 0;       ///< slow_runs runs after the first slow_from take slow_cost (a slow spell of the machine)
  int slow_from = 0;
  double slow_cost = 0;
  int version_ = 1;
  mutable std::atomic<int> runs{0};

 private:
  std::string name_;
  std::vector<std::string> tags_;
  double cost_;
  std::shared_ptr<FakeClock> clock_;
  bool wrong_;
};

/// The lowered convolution nodes of a graph, in order.
inline std::vector<const ConvImplOp*> conv_impls(const FunctionGraph& g) {
  std::vector<const ConvImplOp*> out;
  for (const auto& v : g.toposort())
    if (const auto* c = as_conv_impl(v)) out.push_back(c);
  return out;
}

/// Optimizes outputs(inputs) under mode and returns the graph (no runtime involved).
inline FunctionGraph optimized(const std::vector<Var>& inputs, const std::vector<Var>& outputs, const Mode& mode,
                               CompileStats* stats = nullptr) {
  FunctionGraph g(inputs, outputs);
  CompileStats local;
  optimize(g, mode, stats ? *stats : local);
  return g;
}

/// The algorithm each lowered conv runs, in order ("auto" for a run-time choice).
inline std::vector<std::string> chosen(const FunctionGraph& g) {
  std::vector<std::string> names;
  for (const auto* c : conv_impls(g)) names.push_back(c->algorithm() ? c->algorithm()->name() : "auto");
  return names;
}

/// A temporary file path, removed (with its lock and temp siblings) on destruction.
struct TempPath {
  std::string path;
  explicit TempPath(const std::string& stem);
  ~TempPath();
};

}  // namespace convgraph::testing
