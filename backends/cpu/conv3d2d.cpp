// "cpu.conv3d2d" (work in progress: declines everything for now).
#include "convgraph/backends/cpu/algorithms.hpp"

namespace convgraph {
namespace {
class Conv3d2d final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.conv3d2d"; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv3d2d"}; }
  Status applicable(const ConvProblem&) const override { return Status::no("cpu.conv3d2d: not implemented yet"); }
  void run(const ConvProblem&, const ConvTensors&, const ConvContext&) const override {
    throw ValueError("cpu.conv3d2d: not implemented yet");
  }
};
}  // namespace
std::shared_ptr<const ConvAlgorithm> make_cpu_conv3d2d_algorithm() { return std::make_shared<Conv3d2d>(); }
}  // namespace convgraph
