#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/child_process.hpp"

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

namespace {
/// Sets the host cache's limit for a test and restores it (emptied) afterwards.
struct HostCacheLimit {
  std::size_t saved = host_cache_limit();
  explicit HostCacheLimit(std::size_t bytes) {
    release_host_cache();
    set_host_cache_limit(bytes);
  }
  ~HostCacheLimit() {
    release_host_cache();
    set_host_cache_limit(saved);
  }
};
constexpr std::size_t kMiB = std::size_t{1} << 20;
}  // namespace

TEST_CASE("tensor: freed host buffers from 256 KiB are reused for the same size, up to the limit", "[core][tensor]") {
  HostCacheLimit limit(3 * kMiB);
  void* first = nullptr;
  {
    const auto s = allocate_host(kMiB);
    first = s->data;
    CHECK(host_cache_bytes() == 0);
  }
  CHECK(host_cache_bytes() == kMiB);
  {
    const auto other = allocate_host(kMiB + 4096);  // another size: not that block
    CHECK(other->data != first);
    CHECK(host_cache_bytes() == kMiB);
    const auto s = allocate_host(kMiB - 10);  // rounds to the same 64-byte multiple
    CHECK(s->data == first);
    CHECK(host_cache_bytes() == 0);
    static_cast<char*>(s->data)[kMiB - 11] = 1;  // writable to the end
  }
  CHECK(host_cache_bytes() == 2 * kMiB + 4096);
  {
    const auto small = allocate_host(4000);  // below 256 KiB: freed, not kept
  }
  CHECK(host_cache_bytes() == 2 * kMiB + 4096);
  {
    const auto a = allocate_host(kMiB), b = allocate_host(kMiB), c = allocate_host(kMiB);
    CHECK(host_cache_bytes() == kMiB + 4096);
  }
  CHECK(host_cache_bytes() <= 3 * kMiB);  // the third over the limit was freed
  CHECK(host_cache_bytes() == kMiB + 4096 + kMiB);
  CHECK(release_host_cache() == 2 * kMiB + 4096);
  CHECK(host_cache_bytes() == 0);
  set_host_cache_limit(8 * kMiB);
  {
    const auto big = allocate_host(4 * kMiB);  // huge-page buffers keep their alignment
    first = big->data;
  }
  CHECK(host_cache_bytes() == 4 * kMiB);
  {
    const auto almost = allocate_host(4 * kMiB - 1);  // the same rounded size, 64-byte aligned: not that block
    CHECK(host_cache_bytes() == 4 * kMiB);
    const auto big = allocate_host(4 * kMiB);
    CHECK(host_cache_bytes() == 0);
    CHECK(big->data == first);
    CHECK(reinterpret_cast<std::uintptr_t>(big->data) % (2 * kMiB) == 0);
  }
  set_host_cache_limit(kMiB);  // lowering the limit releases what is over it
  CHECK(host_cache_bytes() == 0);
  set_host_cache_limit(0);
  { const auto s = allocate_host(kMiB); }
  CHECK(host_cache_bytes() == 0);
}

TEST_CASE("tensor: the host cache is safe from many threads", "[core][tensor]") {
  HostCacheLimit limit(8 * kMiB);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &bad] {
      for (int i = 0; i < 200; ++i) {
        const std::size_t bytes = (std::size_t{256} << 10) << ((i + t) % 3);
        const auto s = allocate_host(bytes);
        auto* c = static_cast<unsigned char*>(s->data);
        c[0] = c[bytes - 1] = static_cast<unsigned char>(t);
        if (c[0] != t || c[bytes - 1] != t) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(bad == 0);
  CHECK(host_cache_bytes() <= 8 * kMiB);
}

TEST_CASE("tensor: a function called again reuses its output's freed buffer", "[core][tensor]") {
  HostCacheLimit limit(64 * kMiB);
  Var x = input(DType::float32, {256, 1024}, "x");
  Function f = compile({x}, {x * 2.0});
  const Tensor in = Tensor::full(DType::float32, {256, 1024}, 1.5);
  const void* first = nullptr;
  {
    const std::vector<Tensor> out = f({in});
    first = out[0].raw();
    CHECK(out[0].get(1000) == 3.0);
  }
  const std::vector<Tensor> again = f({in});
  CHECK(again[0].raw() == first);
  CHECK(again[0].get(1000) == 3.0);
  CHECK(again[0].get(256 * 1024 - 1) == 3.0);
}

#if defined(__SANITIZE_ADDRESS__)
#define CONVGRAPH_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CONVGRAPH_TEST_ASAN 1
#endif
#endif

TEST_CASE("tensor: a buffer held for reuse is poisoned for AddressSanitizer", "[core][tensor]") {
#if defined(CONVGRAPH_TEST_ASAN)
  HostCacheLimit limit(4 * kMiB);
  const int rc = test::run_in_child([] {
    volatile char* stale = nullptr;
    {
      const auto s = allocate_host(kMiB);
      stale = static_cast<char*>(s->data);
    }
    stale[100] = 1;  // a use after release: ASan reports it and exits
    return 0;
  });
  CHECK(rc != 0);
#else
  WARN("SKIPPED: only an AddressSanitizer build poisons held buffers");
#endif
}
