#include "convgraph/backends/conv_algorithm.hpp"

namespace convgraph {

void AlgorithmRegistry::add(std::shared_ptr<const ConvAlgorithm> algo) {
  if (find(algo->name()) != nullptr)
    throw ValueError(msg("AlgorithmRegistry: algorithm '", algo->name(), "' is already registered"));
  algos_.push_back(std::move(algo));
}

const ConvAlgorithm* AlgorithmRegistry::find(std::string_view name) const {
  for (const auto& a : algos_)
    if (a->name() == name) return a.get();
  return nullptr;
}

const AlgorithmRegistry& AlgorithmRegistry::builtin() {
  static const AlgorithmRegistry registry = [] {
    AlgorithmRegistry r;
    // Registration order is the default priority order within each device.
    register_cuda_conv_algorithms(r);
    register_cpu_conv_algorithms(r);
    return r;
  }();
  return registry;
}

}  // namespace convgraph
