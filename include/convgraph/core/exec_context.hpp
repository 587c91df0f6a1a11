#pragma once
/// What a kernel or a convolution algorithm runs with: a thread pool (CPU), a stream
/// (CUDA), and a workspace of the size it asked for, 64-byte aligned. One struct for op
/// kernels (ExecContext) and convolution algorithms (ConvContext, the same type).
#include <cstddef>

namespace convgraph {

class ThreadPool;

struct ExecContext {
  ThreadPool* pool = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  void* stream = nullptr;  ///< cudaStream_t on CUDA; nullptr: the thread's current stream
};

}  // namespace convgraph
