// "cpu.winograd" (work in progress: declines everything for now).
#include "convgraph/backends/cpu/algorithms.hpp"

namespace convgraph {
namespace {
class WinogradConv final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.winograd"; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_winograd", "fast_run"}; }
  Status applicable(const ConvProblem&) const override { return Status::no("cpu.winograd: not implemented yet"); }
  void run(const ConvProblem&, const ConvTensors&, const ConvContext&) const override {
    throw ValueError("cpu.winograd: not implemented yet");
  }
};
}  // namespace
std::shared_ptr<const ConvAlgorithm> make_cpu_winograd_algorithm() { return std::make_shared<WinogradConv>(); }
}  // namespace convgraph
