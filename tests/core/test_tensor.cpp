#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/host_cache.hpp"
#include "support/child_process.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define CG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CG_TEST_ASAN 1
#endif
#endif
#if defined(CG_TEST_ASAN)
#include <sanitizer/asan_interface.h>
#endif

using namespace convgraph;

TEST_CASE("tensor: construction, element access, 64-byte alignment", "[core][tensor]") {
  Tensor t = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.dtype() == DType::float32);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Shape{3, 1});
  CHECK(t.at<float>({1, 2}) == 6.f);
  CHECK(reinterpret_cast<std::uintptr_t>(t.raw()) % 64 == 0);
  Tensor i = Tensor::of<std::int64_t>({7, 8, 9});
  CHECK(i.dtype() == DType::int64);
  CHECK(i.get(2) == 9.0);
  CHECK(Tensor::zeros(DType::float64, {3}).to_vector() == std::vector<double>{0, 0, 0});
  CHECK(Tensor::scalar(2.5, DType::float64).rank() == 0);
}

TEST_CASE("tensor: host buffers from 4 MiB up are 2 MiB aligned (huge pages), smaller ones 64", "[core][tensor]") {
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{4000}, (std::size_t{4} << 20) - 1}) {
    const auto s = allocate_host(bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(s->data) % 64 == 0);
    CHECK(s->bytes == bytes);
  }
  for (const std::size_t bytes : {std::size_t{4} << 20, (std::size_t{5} << 20) + 3}) {
    const auto s = allocate_host(bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(s->data) % (std::size_t{2} << 20) == 0);
    CHECK(s->bytes == bytes);
    static_cast<char*>(s->data)[bytes - 1] = 1;  // writable to the end
  }
  Tensor big(DType::float32, {1 << 20, 2});  // 8 MiB
  CHECK(reinterpret_cast<std::uintptr_t>(big.raw()) % (std::size_t{2} << 20) == 0);
}

TEST_CASE("tensor: views share storage; copies do not", "[core][tensor]") {
  Tensor t = Tensor::from({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tr = t.permute({1, 0});
  CHECK(tr.shape() == Shape{3, 2});
  CHECK_FALSE(tr.is_contiguous());
  CHECK(tr.to_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});
  Tensor s = t.slice(1, 0, 3, 2);
  CHECK(s.to_vector() == std::vector<double>{0, 2, 3, 5});
  Tensor r = t.reshape({3, -1});
  CHECK(r.shape() == Shape{3, 2});
  r.set(0, 42);
  CHECK(t.get(0) == 42);  // reshape of contiguous data is a view
  Tensor c = tr.contiguous();
  c.set(0, -1);
  CHECK(t.get(0) == 42);
  CHECK(t.astype(DType::int32).get(5) == 5);
}

TEST_CASE("tensor: views of an empty tensor with huge extents keep a sane offset", "[core][tensor]") {
  // The tensor fuzzer's case: 0 elements reshaped to a 2^62-long axis, sliced from its end,
  // then sliced again along an axis whose stride is that long (UBSan saw the offset overflow).
  const std::int64_t huge = std::int64_t{1} << 62;
  Tensor t = Tensor::zeros(DType::boolean, {3, 0}).reshape({0, 1, huge});  // 1-byte elements
  Tensor s = t.slice(2, -1, huge, 3).permute({1, 0, 2});
  CHECK(s.shape() == Shape{1, 0, 1});
  Tensor e = s.slice(0, 1, 2, 1);
  CHECK(e.shape() == Shape{0, 0, 1});
  CHECK(e.offset() == t.offset());
  CHECK(e.to_vector().empty());
}

TEST_CASE("tensor: bad inputs raise typed errors", "[core][tensor][errors]") {
  Tensor t = Tensor::from({1, 2, 3, 4}, {2, 2});
  CHECK_THROWS_AS(Tensor::from({1, 2, 3}, {2, 2}), ShapeError);
  CHECK_THROWS_AS(t.at<double>({0, 0}), TypeError);
  CHECK_THROWS_AS(t.at<float>({2, 0}), ShapeError);
  CHECK_THROWS_AS(t.reshape({3, 2}), ShapeError);
  CHECK_THROWS_AS(t.permute({0, 0}), ShapeError);
  CHECK_THROWS_AS(Tensor(DType::float32, {-2, 3}), ShapeError);
  CHECK_THROWS_WITH(t.reshape({3, 2}), Catch::Contains("(2, 2)") && Catch::Contains("(3, 2)"));
  CHECK_THROWS_WITH(t.get(4), Catch::Contains("Tensor::get") && Catch::Contains("flat index 4") &&
                                  Catch::Contains("4 elements"));
  CHECK_THROWS_AS(t.get(-1), ShapeError);
  CHECK_THROWS_WITH(t.set(7, 1.0), Catch::Contains("Tensor::set") && Catch::Contains("flat index 7"));
  CHECK(t.get(3) == 4.0);
}

TEST_CASE("tensor: float16 and bfloat16 storage round-trip through casts", "[core][tensor]") {
  const Tensor f = Tensor::from({1.0, -2.5, 65504, 1e-7, 0.333333}, {5}, DType::float32);
  const Tensor h = f.astype(DType::float16);
  CHECK(h.nbytes() == 10);
  CHECK(h.get(0) == 1.0);
  CHECK(h.get(1) == -2.5);
  CHECK(h.get(2) == 65504);                         // largest finite half
  CHECK(h.get(3) == Approx(1.19209e-07).epsilon(0.01));  // subnormal
  CHECK(h.get(4) == Approx(0.333333).epsilon(1e-3));
  const Tensor b = f.astype(DType::bfloat16);
  CHECK(b.get(1) == -2.5);
  CHECK(b.get(4) == Approx(0.333333).epsilon(4e-3));
  CHECK(b.astype(DType::float32).get(0) == 1.0);
}

TEST_CASE("tensor: a freed large host buffer is handed out again at the same size class", "[core][tensor][host_cache]") {
  host_empty_cache();
  const std::size_t mib = std::size_t{1} << 20;
  const HostCacheStats before = host_cache_stats();
  CHECK(before.bytes_cached == 0);
  CHECK(before.buffers_cached == 0);
  auto a = allocate_host(6 * mib);
  void* const first = a->data;
  a.reset();
  const HostCacheStats freed = host_cache_stats();
  if (freed.limit_bytes < 6 * mib) {  // CONVGRAPH_HOST_CACHE_MB=0 (or tiny): nothing is kept
    CHECK(freed.bytes_cached == 0);
    return;
  }
  CHECK(freed.bytes_cached == 6 * mib);
  CHECK(freed.buffers_cached == 1);
#if defined(CG_TEST_ASAN)
  CHECK(__asan_address_is_poisoned(first));  // a read through a stale pointer is reported
#endif
  auto b = allocate_host(6 * mib - 100);  // rounds to the same 2 MiB class
  CHECK(b->data == first);
#if defined(CG_TEST_ASAN)
  CHECK_FALSE(__asan_address_is_poisoned(first));
#endif
  CHECK(b->bytes == 6 * mib - 100);
  CHECK(host_cache_stats().hits == freed.hits + 1);
  CHECK(host_cache_stats().bytes_cached == 0);
  b.reset();  // the 6 MiB buffer is cached again
  auto c = allocate_host(8 * mib);  // another class: a fresh buffer, not the cached one
  CHECK(c->data != first);
  CHECK(host_cache_stats().misses == freed.misses + 1);
  CHECK(host_cache_stats().bytes_cached == 6 * mib);
  static_cast<char*>(c->data)[8 * mib - 1] = 1;
  {
    auto small = allocate_host(mib);  // below 4 MiB: glibc's business, never cached
  }
  CHECK(host_cache_stats().bytes_cached == 6 * mib);
  c.reset();
  CHECK(host_cache_stats().bytes_cached == 14 * mib);
  CHECK(host_cache_stats().buffers_cached == 2);
  host_empty_cache();
  CHECK(host_cache_stats().bytes_cached == 0);
  CHECK(host_cache_stats().buffers_cached == 0);
}

TEST_CASE("host cache: at most its limit, the oldest freed first, the newest taken first", "[core][tensor][host_cache]") {
  constexpr std::size_t kCap = 4096;
  const auto buffer = [] { return std::aligned_alloc(64, kCap); };
  detail::HostBufferCache cache(3 * kCap + 100);
  void* a = buffer();
  void* b = buffer();
  void* c = buffer();
  void* d = buffer();
  REQUIRE(cache.put(a, kCap));
  REQUIRE(cache.put(b, kCap));
  REQUIRE(cache.put(c, kCap));
  CHECK(cache.stats().bytes_cached == 3 * kCap);
  REQUIRE(cache.put(d, kCap));  // a is freed to make room
  CHECK(cache.stats().buffers_cached == 3);
  CHECK(cache.take(2 * kCap) == nullptr);  // no buffer of that size
  CHECK(cache.take(kCap) == d);
  CHECK(cache.take(kCap) == c);
  CHECK(cache.take(kCap) == b);
  CHECK(cache.take(kCap) == nullptr);
  const HostCacheStats s = cache.stats();
  CHECK(s.hits == 3);
  CHECK(s.misses == 2);
  CHECK(s.limit_bytes == 3 * kCap + 100);
  void* big = std::aligned_alloc(64, 4 * kCap);
  CHECK_FALSE(cache.put(big, 4 * kCap));  // larger than the whole limit: the caller frees it
  std::free(big);
  REQUIRE(cache.put(b, kCap));
  REQUIRE(cache.put(c, kCap));
  cache.empty();  // frees them
  CHECK(cache.stats().bytes_cached == 0);
  detail::HostBufferCache off(0);
  CHECK_FALSE(off.put(d, kCap));
  std::free(d);
}

TEST_CASE("tensor: CONVGRAPH_HOST_CACHE_MB takes megabytes from 0 to 2^20", "[core][tensor][host_cache][errors]") {
  CHECK(parse_host_cache_mb("0") == 0);
  CHECK(parse_host_cache_mb("512") == 512);
  CHECK(parse_host_cache_mb("1048576") == 1048576);
  for (const char* bad : {"", "-1", "1e3", "64 ", "1048577", "99999999999999999999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_host_cache_mb(bad), ValueError);
    CHECK_THROWS_WITH(parse_host_cache_mb(bad),
                      Catch::Matchers::Contains("CONVGRAPH_HOST_CACHE_MB='" + std::string(bad) + "' is invalid"));
  }
}

// Run in a fresh process by the test below, with CONVGRAPH_HOST_CACHE_MB set: the cache
// reads it when the first large buffer is asked for.
TEST_CASE("host cache child: CONVGRAPH_HOST_CACHE_MB on first use", "[.][host_cache_child]") {
  const char* env = std::getenv("CONVGRAPH_HOST_CACHE_MB");
  REQUIRE(env != nullptr);
  const std::string value = env;
  const std::size_t mib = std::size_t{1} << 20;
  if (value == "0") {  // off: nothing is kept
    { auto a = allocate_host(8 * mib); }
    CHECK(host_cache_stats().limit_bytes == 0);
    CHECK(host_cache_stats().bytes_cached == 0);
  } else if (value == "10") {
    {
      auto a = allocate_host(8 * mib);
      auto b = allocate_host(12 * mib);
      b.reset();  // larger than the whole limit: freed
      CHECK(host_cache_stats().bytes_cached == 0);
    }
    CHECK(host_cache_stats().limit_bytes == 10 * mib);
    CHECK(host_cache_stats().bytes_cached == 8 * mib);
    { auto c = allocate_host(4 * mib); }  // 8 + 4 > 10: the 8 MiB buffer, the oldest, goes
    CHECK(host_cache_stats().bytes_cached == 4 * mib);
    CHECK(host_cache_stats().buffers_cached == 1);
  } else {  // a bad value: every large allocation names it; small ones never ask
    CHECK_THROWS_AS(allocate_host(8 * mib), ValueError);
    CHECK_THROWS_WITH(Tensor(DType::float32, {1 << 21}),
                      Catch::Matchers::Contains("CONVGRAPH_HOST_CACHE_MB='" + value + "' is invalid"));
    CHECK(allocate_host(1024)->bytes == 1024);
  }
}

TEST_CASE("tensor: CONVGRAPH_HOST_CACHE_MB bounds the host cache, 0 turns it off, a bad value is a ValueError",
          "[core][tensor][host_cache][errors]") {
  const std::string child = "host cache child: CONVGRAPH_HOST_CACHE_MB on first use";
  // 0 is what Catch2 returns when every check in the child passed.
  CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_HOST_CACHE_MB", "0"}}) == 0);
  CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_HOST_CACHE_MB", "10"}}) == 0);
  CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_HOST_CACHE_MB", "ten"}}) == 0);
  CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_HOST_CACHE_MB", "2000000"}}) == 0);
}
