#include "core/host_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include <sys/sysinfo.h>

#if defined(__SANITIZE_ADDRESS__)  // GCC
#define CG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang
#define CG_ASAN 1
#endif
#endif
#if defined(CG_ASAN)
#include <sanitizer/asan_interface.h>  // a cached buffer is poisoned: a read through a stale tensor is reported
#define CG_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CG_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define CG_POISON(p, n) ((void)(p), (void)(n))
#define CG_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace convgraph {

namespace detail {

void* HostBufferCache::take(std::size_t capacity) {
  std::lock_guard lock(mu_);
  for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
    if (it->capacity != capacity) continue;
    void* p = it->p;
    free_.erase(std::next(it).base());
    bytes_ -= capacity;
    ++hits_;
    CG_UNPOISON(p, capacity);
    return p;
  }
  ++misses_;
  return nullptr;
}

bool HostBufferCache::put(void* p, std::size_t capacity) noexcept {
  std::deque<Entry> evicted;
  {
    std::lock_guard lock(mu_);
    if (capacity > limit_) return false;
    try {
      while (bytes_ + capacity > limit_) {
        evicted.push_back(free_.front());
        bytes_ -= free_.front().capacity;
        free_.pop_front();
      }
      free_.push_back({p, capacity});
    } catch (...) {  // no memory for the bookkeeping: what was taken out is freed below
      for (const Entry& e : evicted) release(e);
      return false;
    }
    bytes_ += capacity;
    CG_POISON(p, capacity);
  }
  for (const Entry& e : evicted) release(e);  // outside the lock: free() may take a while
  return true;
}

void HostBufferCache::empty() {
  std::deque<Entry> all;
  {
    std::lock_guard lock(mu_);
    all.swap(free_);
    bytes_ = 0;
  }
  for (const Entry& e : all) release(e);
}

HostCacheStats HostBufferCache::stats() const {
  std::lock_guard lock(mu_);
  return {bytes_, free_.size(), limit_, hits_, misses_};
}

void HostBufferCache::release(const Entry& e) {
  CG_UNPOISON(e.p, e.capacity);
  std::free(e.p);
}

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kMaxLimitMiB = std::size_t{1} << 20;  // 1 TiB

// Unset: an eighth of the RAM, at most 4 GiB (ResNet-50's activations at batch 32 are ~3).
std::size_t configured_limit() {
  if (const char* env = std::getenv("CONVGRAPH_HOST_CACHE_MB"); env != nullptr && *env != '\0')
    return parse_host_cache_mb(env) * kMiB;
  struct sysinfo si {};
  if (sysinfo(&si) != 0) return 0;
  const std::size_t ram = static_cast<std::size_t>(si.totalram) * (si.mem_unit ? si.mem_unit : 1);
  return std::min(ram / 8, std::size_t{4} << 30);
}
}  // namespace

HostBufferCache& host_cache() {
  // Leaked: Storage objects may die during static destruction, after which a destroyed
  // cache would be touched; the process's exit returns the memory.
  static HostBufferCache* cache = new HostBufferCache(configured_limit());
  return *cache;
}

}  // namespace detail

std::size_t parse_host_cache_mb(std::string_view text) {
  const auto bad = [&](const char* why) {
    return ValueError(msg("CONVGRAPH_HOST_CACHE_MB='", text, "' is invalid: ", why, " (expected megabytes from 0 to ",
                          detail::kMaxLimitMiB, "; 0 turns the cache off, unset it for an eighth of the RAM up to 4096)"));
  };
  if (text.empty()) throw bad("empty");
  std::size_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') throw bad("not a decimal integer");
    v = v * 10 + static_cast<std::size_t>(c - '0');
    if (v > detail::kMaxLimitMiB) throw bad("too large");
  }
  return v;
}

HostCacheStats host_cache_stats() { return detail::host_cache().stats(); }
void host_empty_cache() { detail::host_cache().empty(); }

}  // namespace convgraph
