#pragma once
// Benchmark operands from the library's host allocator (allocate_host), as a Function's
// tensors get them: large buffers on transparent huge pages where the kernel allows. Every
// implementation a benchmark compares reads the same buffers.
#include <algorithm>
#include <cstddef>
#include <memory>

#include "convgraph/core/tensor.hpp"

namespace convgraph::bench {

struct HostFloats {
  std::shared_ptr<Storage> storage;
  std::size_t n = 0;
  explicit HostFloats(std::size_t count)
      : storage(allocate_host(std::max<std::size_t>(count, 1) * sizeof(float))), n(count) {}
  float* data() const { return static_cast<float*>(storage->data); }
  float* begin() const { return data(); }
  float* end() const { return data() + n; }
};

}  // namespace convgraph::bench
