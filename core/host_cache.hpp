#pragma once
// Private to core: the cache behind allocate_host's large buffers (core/tensor.cpp).
//
// A training step frees its outputs and gradients and asks for the same sizes again in the
// next step. Handing a freed multi-megabyte buffer straight back to glibc returns its pages
// to the kernel (trimmed or unmapped), and the next call faults and zeroes them again:
// Zen 5, 2 threads, a grouped stride-2 grad inputs (8x256x56x56 dx, 25.7 MB) spent 25% of
// its 3.8 ms in the kernel clearing pages, and took 2.5 ms with the cache. So buffers of
// the huge-page classes (4 MiB up, in 2 MiB steps) are kept when freed, up to a limit, and
// handed out again at the same size.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

#include "convgraph/core/tensor.hpp"

namespace convgraph::detail {

/// Freed buffers (from std::aligned_alloc) by exact capacity, at most `limit` bytes in all.
class HostBufferCache {
 public:
  explicit HostBufferCache(std::size_t limit) : limit_(limit) {}
  HostBufferCache(const HostBufferCache&) = delete;
  HostBufferCache& operator=(const HostBufferCache&) = delete;
  ~HostBufferCache() { empty(); }

  /// A cached buffer of exactly `capacity` bytes (the most recently freed one), or nullptr.
  void* take(std::size_t capacity);
  /// Keeps buffer `p` of `capacity` bytes, freeing the oldest buffers past the limit; false
  /// when it is not kept (the limit is 0 or below `capacity`) and the caller frees it.
  /// Never throws: it runs in Storage deleters.
  bool put(void* p, std::size_t capacity) noexcept;
  /// Frees every cached buffer.
  void empty();
  HostCacheStats stats() const;

 private:
  struct Entry {
    void* p;
    std::size_t capacity;
  };
  static void release(const Entry& e);

  const std::size_t limit_;
  mutable std::mutex mu_;
  std::deque<Entry> free_;  // oldest first
  std::size_t bytes_ = 0;
  std::uint64_t hits_ = 0, misses_ = 0;
};

/// The process's cache, its limit read from CONVGRAPH_HOST_CACHE_MB on first use (a bad
/// value throws ValueError here, every time, and nothing is cached). Never destroyed.
HostBufferCache& host_cache();

}  // namespace convgraph::detail
