#pragma once
/// The reuse policy of the CUDA caching allocator (device.cpp), free of CUDA calls so
/// that tests drive it with a fake stream clock (tests/cuda/test_cuda_block_cache.cpp).
/// Built in every configuration (backends/cuda_block_cache.cpp).
///
/// A freed block may still be read or written by kernels queued before it was freed.
/// So put() marks the work queued so far on the block's stream with an event, and take()
/// hands the block out again only
///   - on the same stream, at once (stream order runs the new work after the old), or
///   - on another stream, once that event has completed.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace convgraph::cuda {

/// Which stream a block's work is queued on: the stream handle, and for a handle that
/// names a different stream in each thread (cudaStreamPerThread) the thread it was used
/// from (this_thread_serial(); 0 for ordinary handles).
struct StreamKey {
  void* stream = nullptr;
  std::uint64_t thread = 0;
  bool operator==(const StreamKey&) const = default;
};

/// A number naming the calling thread, never reused in the process (std::thread::id
/// values are reused once a thread ends, and so is its per-thread stream).
std::uint64_t this_thread_serial();

/// What the cache needs from the device: events marking the work queued on a stream.
class StreamClock {
 public:
  virtual ~StreamClock() = default;
  /// An event that completes once all work queued on `s` so far has run, or nullptr when
  /// none could be recorded (the block is then only reused on its own stream).
  virtual void* record(const StreamKey& s) = 0;
  /// Whether `event` has completed; false while pending or when the query failed.
  virtual bool done(void* event) = 0;
  /// Gives `event` back (it may be recycled by a later record()).
  virtual void release(void* event) = 0;
};

class BlockCache {
 public:
  explicit BlockCache(StreamClock& clock) : clock_(clock) {}
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  /// A cached block of size class `cls` that work on `s` may use now, or nullptr.
  /// Prefers a block last used on `s`, then the most recently freed completed one.
  void* take(std::size_t cls, const StreamKey& s);
  /// Caches block `p` of class `cls`, freed after work queued on `s`.
  void put(void* p, std::size_t cls, const StreamKey& s);
  /// The stream is being destroyed: its blocks are from now on reused through their
  /// events only (a new stream may get the same handle).
  void forget_stream(void* stream);
  /// Removes every cached block (their events released), for cudaFree.
  std::vector<std::pair<void*, std::size_t>> take_all();
  std::size_t cached_bytes() const;
  std::size_t cached_blocks() const;

 private:
  struct Entry {
    void* p;
    StreamKey stream;  ///< stream == nullptr: forgotten, matches no stream
    void* event;       ///< nullptr: no event, same-stream reuse only
  };
  Entry remove(std::vector<Entry>& list, std::size_t i);

  StreamClock& clock_;
  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<Entry>> free_;
  std::size_t bytes_ = 0, blocks_ = 0;
};

}  // namespace convgraph::cuda
