#pragma once
// The whole-network benchmark of convgraph-bench (--networks): one record per (network,
// mode), measured as benchmarks/NETWORKS.md defines (convgraph_bench_networks.cpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <convgraph/core/shared.hpp>
#include <convgraph/optimizer/mode.hpp>

namespace convgraph::bench {

struct NetworkOptions {
  Mode mode;          ///< the flags the steps are compiled with
  int threads = 2;
  int warmup = 2;     ///< untimed calls before the timed ones
  int repeats = 10;   ///< timed calls; the median is reported
  std::uint64_t seed = 1;  ///< parameter initialisation
  /// Data-parallel runs (convgraph-bench-mpi): the batch is split into this many shards
  /// and this process trains on one; the hook turns the step's updates into data-parallel
  /// ones (dist::data_parallel) given the gradients.
  int shards = 1;
  std::function<Updates(const Updates&, const std::vector<Var>&)> parallel_updates;
};

struct NetworkRecord {
  std::string network, mode;       ///< mode: "train" (forward, backward, SGD) or "infer"
  double ms = 0, min_ms = 0;       ///< median and fastest call
  double images_per_s = 0;         ///< batch / median
  std::size_t peak_bytes = 0;      ///< peak resident-set growth of the child process
  std::size_t arena_bytes = 0;     ///< the memory planner's intermediate arena
  double compile_s = 0;
  std::size_t fused_convs = 0;     ///< convolutions that absorbed a bias/residual/relu
};

/// lenet, resnet8, c3d_small.
std::vector<std::string> network_names();
/// Builds, compiles and times one network in a fresh child process.
NetworkRecord time_network(const std::string& name, bool train, const NetworkOptions& options);
/// The same in this process (no fork: an MPI process must not fork); peak_bytes is then
/// the growth of this process's peak.
NetworkRecord time_network_here(const std::string& name, bool train, const NetworkOptions& options);

}  // namespace convgraph::bench
