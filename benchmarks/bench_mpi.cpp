// convgraph-bench-mpi: the training step of each network of the network benchmark
// (benchmarks/NETWORKS.md), data-parallel on the ranks of an mpirun job: the network's
// batch is split into one shard per rank and the gradients are averaged by allreduce
// nodes (dist::data_parallel). Alone (no mpirun) it is the one-process step on the whole
// batch. Rank 0 prints one line per network:
//   network ranks global_batch median_ms min_ms images_per_s
// Each step ends with every rank's updates applied, and the reductions synchronise the
// ranks, so rank 0's time per step is the job's. scripts/bench-mpi.sh compares 1 and 2 ranks.
//
// usage: convgraph-bench-mpi [--networks a,b,...] [--threads T] [--warmup W] [--repeats R]
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <convgraph/dist/mpi.hpp>

#include "benchmarks/bench_networks.hpp"

using namespace convgraph;

int main(int argc, char** argv) {
  dist::Session mpi(&argc, &argv);
  bench::NetworkOptions opt;
  opt.mode = Mode::from_env();
  opt.threads = 1;
  std::vector<std::string> networks = bench::network_names();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: convgraph-bench-mpi [--networks a,b] [--threads T] [--warmup W] [--repeats R]\n");
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--networks") {
      networks.clear();
      std::stringstream ss(v);
      for (std::string n; std::getline(ss, n, ',');) networks.push_back(n);
    } else if (a == "--threads") {
      opt.threads = std::atoi(v.c_str());
    } else if (a == "--warmup") {
      opt.warmup = std::atoi(v.c_str());
    } else if (a == "--repeats") {
      opt.repeats = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "convgraph-bench-mpi: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  opt.shards = dist::size();
  if (dist::initialized())
    opt.parallel_updates = [](const Updates& u, const std::vector<Var>& g) { return dist::data_parallel(u, g); };
  try {
    for (const auto& name : networks) {
      if (dist::initialized()) dist::barrier();
      const bench::NetworkRecord r = bench::time_network_here(name, /*train=*/true, opt);
      if (dist::rank() == 0)
        std::printf("%s %d %.0f %.3f %.3f %.1f\n", name.c_str(), dist::size(), r.images_per_s * r.ms / 1000.0, r.ms,
                    r.min_ms, r.images_per_s);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convgraph-bench-mpi (rank %d): %s\n", dist::rank(), e.what());
    return 1;
  }
  return 0;
}
