// The MPI-independent part of dist/: launcher detection, per-rank seeds, the parameter
// broadcast and Session (the collectives themselves are in dist/comm.cpp).
#include <cstdlib>

#include "convgraph/dist/mpi.hpp"
#include "dist/comm.hpp"

namespace convgraph::dist {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

bool init_if_launched(int* argc, char*** argv, const InitOptions& options) {
  if (mpi_built() && launched_by_mpi()) init(argc, argv, options);
  return initialized();
}

std::uint64_t rank_seed(std::uint64_t seed) {
  // splitmix64 of the seed offset by the rank: distinct, well-mixed streams per rank.
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<std::uint64_t>(rank()) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void broadcast(const std::vector<SharedVar>& vars, int root) {
  detail::require_mpi("dist::broadcast");
  if (root < 0 || root >= size())
    throw ValueError(msg("dist::broadcast: root ", root, " is not a rank of this job (ranks 0 to ", size() - 1, ")"));
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (!vars[i].defined()) throw ValueError(msg("dist::broadcast: variable ", i, " is undefined"));
  for (std::size_t i = 0; i < vars.size(); ++i) {
    Tensor t = vars[i].get_value();  // a copy: the variable changes only through set_value
    // Every rank must hold the same type, or the bytes would not line up.
    const std::string mine = msg(dtype_name(t.dtype()), shape_to_string(t.shape()));
    const std::string roots = detail::broadcast_string(rank() == root ? mine : std::string(), root);
    std::int64_t bad = roots != mine, lo = 0, hi = 0;
    detail::min_max(bad, lo, hi);
    if (hi)
      throw ValueError(msg("dist::broadcast: variable ", i, vars[i].name().empty() ? "" : " '" + vars[i].name() + "'",
                           " is ", mine, " on rank ", rank(), " but ", roots, " on the root (rank ", root,
                           "); every rank must pass the same variables"));
    detail::broadcast_bytes(t.raw(), t.nbytes(), root);
    SharedVar v = vars[i];
    v.set_value(t, /*borrow=*/true);
  }
}

Session::Session(int* argc, char*** argv, const InitOptions& options) { init_if_launched(argc, argv, options); }
Session::~Session() { finalize(); }

}  // namespace convgraph::dist
