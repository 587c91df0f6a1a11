#pragma once
// Private to dist/: the few MPI operations the data-parallel layer uses, on MPI_COMM_WORLD,
// behind plain types so that only dist/comm.cpp includes <mpi.h> (and compiles to stubs
// that raise RuntimeError in a build without MPI).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "convgraph/core/dtype.hpp"

namespace convgraph::dist::detail {

/// Throws RuntimeError naming `who` unless MPI is built and initialised.
void require_mpi(const std::string& who);

/// A non-blocking sum-allreduce in flight (one MPI_Iallreduce per 2^30 elements).
class Pending {
 public:
  virtual ~Pending() = default;
  /// Blocks until the reduction is complete (MPI_Waitall). RuntimeError on an MPI error.
  virtual void wait() = 0;
};

/// Starts summing `count` elements of `dtype` at `data` over all ranks, in place. The
/// buffer must stay untouched until wait(). First drives every reduction already in flight
/// (MPI_Test), so they progress while the caller computes.
std::unique_ptr<Pending> start_sum(void* data, std::int64_t count, DType dtype);

/// Smallest and largest `value` over all ranks (blocking).
void min_max(std::int64_t value, std::int64_t& lo, std::int64_t& hi);
/// MPI_Bcast of `bytes` bytes from `root`.
void broadcast_bytes(void* data, std::size_t bytes, int root);
/// Rank `root`'s string, on every rank.
std::string broadcast_string(const std::string& s, int root = 0);

/// The NCCL path (dist/nccl.cpp): an in-place sum or average of a device buffer on `stream`
/// (stream-ordered; nothing to wait for on the host). RuntimeError without NCCL.
void nccl_allreduce(void* data, std::int64_t count, DType dtype, bool average, void* stream);
/// cudaMemcpyAsync device to device on `stream`. RuntimeError without NCCL.
void device_copy(void* dst, const void* src, std::size_t bytes, void* stream);

}  // namespace convgraph::dist::detail
