#pragma once
/// Data-parallel training on MPI (and NCCL between GPUs): every process (rank) of an
/// `mpirun -np N` job holds the same model, runs the same compiled step on its shard of
/// each global batch, and averages the gradients with an `allreduce` graph op before the
/// update, so all ranks keep identical parameters. docs/DISTRIBUTED.md has the design.
///
/// This header compiles in every build. Without MPI (CONVGRAPH_WITH_MPI=OFF, or no MPI
/// found) mpi_built() is false and every call that needs MPI raises RuntimeError saying
/// so; rank() and size() still answer (0 and 1: one process is a job of one).
///
/// Contract: collectives (the allreduce nodes a Function runs, broadcast(), compile() with
/// the meta-optimizer while tuning agreement is on) must be issued by every rank in the
/// same order, one thread at a time: compile and call the same Functions on every rank.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "convgraph/core/graph.hpp"
#include "convgraph/core/shared.hpp"

namespace convgraph::dist {

/// Whether this library was built with MPI (CONVGRAPH_WITH_MPI).
bool mpi_built();
/// Whether the library was built with the NCCL path (MPI and CUDA with NCCL): allreduce
/// nodes placed on the GPU then reduce device buffers with ncclAllReduce.
bool nccl_built();
/// Whether the environment says an MPI launcher (mpirun, mpiexec, srun) started this
/// process: Open MPI's OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set.
bool launched_by_mpi();

struct InitOptions {
  /// Rank 0 runs the meta-optimizer and broadcasts its choices (see set_tuning_agreement
  /// in convgraph/optimizer/tuning_agreement.hpp); off: each rank tunes alone.
  bool agree_on_tuning = true;
};

/// Initialises MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless the program already did,
/// and, with several ranks and agree_on_tuning, installs the tuning agreement. Calling it
/// again does nothing. RuntimeError without MPI or after finalize().
void init(int* argc = nullptr, char*** argv = nullptr, const InitOptions& options = {});
/// init() when mpi_built() and launched_by_mpi(); returns initialized(). Lets one program
/// run alone or under mpirun unchanged.
bool init_if_launched(int* argc = nullptr, char*** argv = nullptr, const InitOptions& options = {});
/// Removes the tuning agreement and finalises MPI if init() initialised it. Idempotent.
void finalize();
bool initialized();
/// This process's rank in MPI_COMM_WORLD and the number of ranks; 0 and 1 when MPI is not
/// initialised (or not built).
int rank();
int size();
/// Waits until every rank reaches it. RuntimeError when MPI is not initialised.
void barrier();

/// A seed for this rank's RandomStream: a mix of `seed` and rank() (splitmix64), so
/// dropout masks differ between ranks (each rank sees other samples; equal masks would
/// correlate them) while the run stays reproducible. Parameter initialisation must NOT use
/// it: initialise from a plain seed, or on rank 0 and broadcast(). Without MPI, rank 0.
std::uint64_t rank_seed(std::uint64_t seed);

/// Replaces each variable's value by rank `root`'s (MPI_Bcast of the host values): the
/// parameters' consistency at start. Every rank passes the same variables in the same
/// order. ValueError for a root outside [0, size()), an undefined variable, or a variable
/// whose dtype or shape differs between ranks (naming it and both shapes).
void broadcast(const std::vector<SharedVar>& vars, int root = 0);

enum class ReduceOp { sum, mean };

/// The all-reduce of x over the ranks: the element-wise sum, or the mean (sum / size()),
/// of every rank's x; the same value on every rank. dtypes: float32, float64, int32,
/// int64 (mean: float only); x's shape must be equal on every rank (checked at the first
/// call of each element count: ValueError naming both counts). TypeError/ValueError
/// naming "allreduce", the argument and the value otherwise.
///
/// It is two nodes: allreduce_start, whose kernel copies x into a buffer and starts a
/// non-blocking MPI_Iallreduce on it, and allreduce_wait, which waits for it (MPI_Wait)
/// and writes the result, so the schedule may run other nodes between them.
///
/// Gradient: allreduce(g, op) of the output gradient g. With the loss L = sum over ranks
/// of each rank's L_r, every rank's x contributes to every rank's y, so
/// dL/dx = sum_r dL_r/dy (sum) or its mean (mean): the same all-reduce.
/// Building the node needs no MPI; running it needs init() (RuntimeError naming the node
/// otherwise).
Var allreduce(const Var& x, ReduceOp op = ReduceOp::sum);

struct DataParallelOptions {
  ReduceOp op = ReduceOp::mean;  ///< mean: every rank's shard weighs the same
  /// Gradients are packed into buckets of up to this many bytes (of one dtype), one
  /// MPI_Iallreduce each; a larger gradient gets a bucket of its own.
  std::size_t bucket_bytes = std::size_t{256} << 10;
  /// data_parallel() also averages the updates that do not depend on the gradients (batch
  /// norm's running statistics: each rank computes them from its own shard), so every
  /// rank keeps identical state.
  bool average_state = true;
};

/// The all-reduced gradients, in the order given: buckets are formed in the order the
/// backward pass produces the gradients (graph creation order: the last layer's first),
/// and each bucket's allreduce_start depends on the previous bucket's, so the schedule
/// starts a bucket's reduction as soon as its gradients exist, computes the remaining
/// gradients meanwhile, and waits only before the first update.
std::vector<Var> allreduce_gradients(const std::vector<Var>& grads, const DataParallelOptions& options = {});

/// Turns a single-process update list into a data-parallel one: every use of grads[i] in
/// the update values is replaced by its all-reduced mean (allreduce_gradients), and, with
/// average_state, each update value that does not depend on any gradient is averaged over
/// the ranks too. Optimizer state (momentum, Adam moments) is computed from the averaged
/// gradients, so it stays identical on every rank.
///
///   Updates u = dist::data_parallel(sgd(params, grads, {.lr = 0.1}), grads);
///
/// ValueError when a gradient is undefined or no update value uses it (naming its index).
Updates data_parallel(const Updates& updates, const std::vector<Var>& grads, const DataParallelOptions& options = {});

/// RAII for a program's main(): init_if_launched() in the constructor, finalize() in the
/// destructor.
class Session {
 public:
  Session(int* argc, char*** argv, const InitOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

}  // namespace convgraph::dist
