// The GPU path of allreduce (built with MPI, CUDA and NCCL): ncclAllReduce in place on the
// device bucket, on the node's stream. One NCCL communicator spans MPI_COMM_WORLD; rank 0
// makes its unique id and MPI broadcasts it. Each rank uses its current CUDA device (one
// GPU per rank: set CUDA_VISIBLE_DEVICES per rank, or cudaSetDevice before init).
#include "dist/comm.hpp"

#include "convgraph/dist/mpi.hpp"

#if CONVGRAPH_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <mutex>
#endif

namespace convgraph::dist {

bool nccl_built() { return CONVGRAPH_WITH_NCCL != 0; }

namespace detail {

#if CONVGRAPH_WITH_NCCL

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw DeviceError(msg("allreduce: ", what, " failed on rank ", rank(), ": ", ncclGetErrorString(r)));
}

ncclComm_t comm() {
  static std::once_flag once;
  static ncclComm_t c = nullptr;
  std::call_once(once, [] {
    require_mpi("allreduce (NCCL)");
    ncclUniqueId id{};
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    broadcast_bytes(&id, sizeof id, 0);
    check_nccl(ncclCommInitRank(&c, size(), id, rank()), "ncclCommInitRank");
  });
  return c;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::float16: return ncclFloat16;
    case DType::float32: return ncclFloat32;
    case DType::float64: return ncclFloat64;
    case DType::int32: return ncclInt32;
    case DType::int64: return ncclInt64;
    default: throw TypeError(msg("allreduce: dtype ", dtype_name(t), " has no NCCL type"));
  }
}

}  // namespace

void nccl_allreduce(void* data, std::int64_t count, DType dtype, bool average, void* stream) {
  check_nccl(ncclAllReduce(data, data, static_cast<std::size_t>(count), nccl_type(dtype), average ? ncclAvg : ncclSum,
                           comm(), static_cast<cudaStream_t>(stream)),
             "ncclAllReduce");
}

void device_copy(void* dst, const void* src, std::size_t bytes, void* stream) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) throw DeviceError(msg("allreduce: cudaMemcpyAsync failed: ", cudaGetErrorString(e)));
}

#else

void nccl_allreduce(void*, std::int64_t, DType, bool, void*) {
  throw RuntimeError("allreduce: device buffers need the NCCL path, and convgraph was built without it "
                     "(it needs MPI, CUDA and NCCL)");
}
void device_copy(void*, const void*, std::size_t, void*) { nccl_allreduce(nullptr, 0, DType::float32, false, nullptr); }

#endif

}  // namespace detail
}  // namespace convgraph::dist
