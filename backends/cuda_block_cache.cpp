// The caching allocator's stream-ordered reuse policy (backends/cuda/block_cache.hpp).
// GPU-free: built in every configuration and tested with a fake stream clock.
#include "backends/cuda/block_cache.hpp"

#include <atomic>

namespace convgraph::cuda {

std::uint64_t this_thread_serial() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t serial = next.fetch_add(1);
  return serial;
}

BlockCache::Entry BlockCache::remove(std::vector<Entry>& list, std::size_t i) {
  const Entry e = list[i];
  list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
  --blocks_;
  return e;
}

void* BlockCache::take(std::size_t cls, const StreamKey& s) {
  std::lock_guard lock(mu_);
  auto it = free_.find(cls);
  if (it == free_.end() || it->second.empty()) return nullptr;
  std::vector<Entry>& list = it->second;
  // Newest first: a recently freed block is the likeliest to be warm in L2 and, on
  // another stream, the least likely to be done; same-stream blocks need no event.
  std::size_t pick = list.size();
  for (std::size_t i = list.size(); i-- > 0;)
    if (list[i].stream.stream && list[i].stream == s) {
      pick = i;
      break;
    }
  if (pick == list.size())
    for (std::size_t i = list.size(); i-- > 0;)
      if (list[i].event && clock_.done(list[i].event)) {
        pick = i;
        break;
      }
  if (pick == list.size()) return nullptr;
  const Entry e = remove(list, pick);
  if (e.event) clock_.release(e.event);
  bytes_ -= cls;
  return e.p;
}

void BlockCache::put(void* p, std::size_t cls, const StreamKey& s) {
  void* event = clock_.record(s);  // outside the lock: recording may take a while
  std::lock_guard lock(mu_);
  free_[cls].push_back(Entry{p, s, event});
  bytes_ += cls;
  ++blocks_;
}

void BlockCache::forget_stream(void* stream) {
  std::lock_guard lock(mu_);
  for (auto& [cls, list] : free_)
    for (Entry& e : list)
      if (e.stream.stream == stream) e.stream = StreamKey{};
}

std::vector<std::pair<void*, std::size_t>> BlockCache::take_all() {
  std::unordered_map<std::size_t, std::vector<Entry>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(free_);
    bytes_ = blocks_ = 0;
  }
  std::vector<std::pair<void*, std::size_t>> out;
  for (auto& [cls, list] : all)
    for (const Entry& e : list) {
      if (e.event) clock_.release(e.event);
      out.emplace_back(e.p, cls);
    }
  return out;
}

std::size_t BlockCache::cached_bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::size_t BlockCache::cached_blocks() const {
  std::lock_guard lock(mu_);
  return blocks_;
}

}  // namespace convgraph::cuda
