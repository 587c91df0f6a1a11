// The CUDA probe, allocator, copies, streams and timer: the no-GPU behaviour runs
// anywhere; the "[cuda]" cases need a GPU and skip themselves (saying why) without one.
#include <catch2/catch.hpp>

#include "convgraph/backends/cuda.hpp"
#include "convgraph/core/tensor.hpp"

#if CONVGRAPH_WITH_CUDA
#include <convgraph/convgraph.hpp>

#include "backends/cuda/device.hpp"
#include "backends/cuda/op_kernels.hpp"
#include "support/child_process.hpp"
#include "support/skip_without_gpu.hpp"

using namespace convgraph;


TEST_CASE("cuda_info is probed once and reports why CUDA is unusable", "[cuda_device]") {
  const CudaInfo& info = cuda_info();
  CHECK(&info == &cuda_info());
  CHECK(info.built);
  CHECK(info.cudnn_version >= 90000);  // cudnnGetVersion() works without a GPU
  if (info.available) {
    CHECK(info.reason.empty());
    CHECK_FALSE(info.device_name.empty());
  } else {
    INFO("reason: " << info.reason);
    CHECK_FALSE(info.reason.empty());
    // Names the failing call and carries the library's own error text.
    const bool names_call = info.reason.find("cudaGetDeviceCount") != std::string::npos ||
                            info.reason.find("cudnnCreate") != std::string::npos ||
                            info.reason.find("cudaGetDeviceProperties") != std::string::npos;
    CHECK(names_call);
    CHECK(info.device_name.empty());
  }
}

TEST_CASE("without a GPU, device memory, streams and timers throw DeviceError", "[cuda_device]") {
  if (cuda_info().available) {
    WARN("SKIPPED: a GPU is present (" << cuda_info().device_name << "): the no-GPU path is not exercised");
    return;
  }
  try {
    (void)allocate_cuda(1024);
    FAIL("allocate_cuda did not throw");
  } catch (const DeviceError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("allocate_cuda") && Catch::Contains(cuda_info().reason));
  }
  CHECK_THROWS_AS(allocate_cuda(0), DeviceError);
  const Tensor host = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_THROWS_AS(to_device(host, DeviceKind::cuda), DeviceError);
  CHECK_THROWS_AS(CudaStream(), DeviceError);
  CHECK_THROWS_AS(CudaEventTimer(), DeviceError);
  CHECK_THROWS_AS(synchronize_stream(), DeviceError);
  CHECK_THROWS_AS(cuda_memory_info(), DeviceError);
  CHECK_NOTHROW(cuda_empty_cache());
  const CudaAllocatorStats s = cuda_allocator_stats();
  CHECK(s.bytes_in_use == 0);
  CHECK(s.device_allocations == 0);
}

TEST_CASE("to_device to the host copies to a contiguous host tensor", "[cuda_device]") {
  const Tensor t = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor tt = t.permute({1, 0});
  const Tensor c = to_device(tt, DeviceKind::cpu);
  CHECK(c.device() == DeviceKind::cpu);
  CHECK(c.is_contiguous());
  CHECK(c.shape() == Shape{3, 2});
  CHECK(c.to_vector() == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK_THROWS_AS(to_device(Tensor(), DeviceKind::cpu), ValueError);
}

TEST_CASE("size classes: four per power of two, at most 25% slack", "[cuda_device]") {
  CHECK(cuda_size_class(0) == 512);
  CHECK(cuda_size_class(1) == 512);
  CHECK(cuda_size_class(512) == 512);
  CHECK(cuda_size_class(513) == 640);
  CHECK(cuda_size_class(1000) == 1024);
  CHECK(cuda_size_class(1025) == 1280);
  CHECK(cuda_size_class(std::size_t{1} << 20) == std::size_t{1} << 20);
  CHECK(cuda_size_class((std::size_t{1} << 20) + 1) == (std::size_t{1} << 20) + (std::size_t{1} << 18));
  std::size_t prev = 0;
  for (std::size_t b = 1; b < (1u << 16); b += 7) {
    const std::size_t c = cuda_size_class(b);
    REQUIRE(c >= b);
    REQUIRE(c >= prev);
    if (b > 512) REQUIRE(static_cast<double>(c) <= 1.25 * static_cast<double>(b));
    REQUIRE(cuda_size_class(c) == c);  // classes are fixed points
    prev = c;
  }
}

TEST_CASE("current stream: per-thread default, nested guards restore it", "[cuda_device]") {
  void* base = current_stream();
  CHECK(base != nullptr);  // cudaStreamPerThread
  int a = 0, b = 0;
  {
    CurrentStreamGuard g1(&a);
    CHECK(current_stream() == &a);
    {
      CurrentStreamGuard g2(&b);
      CHECK(current_stream() == &b);
    }
    CHECK(current_stream() == &a);
  }
  CHECK(current_stream() == base);
}

// ---- with a GPU ---------------------------------------------------------------------

TEST_CASE("GPU: allocations are cached and reused", "[cuda]") {
  SKIP_WITHOUT_GPU();
  const CudaAllocatorStats before = cuda_allocator_stats();
  void* first = nullptr;
  {
    auto s = allocate_cuda(1000);
    first = s->data;
    CHECK(s->device == DeviceKind::cuda);
    CHECK(s->bytes == 1000);
  }
  auto again = allocate_cuda(1020);  // same 1024-byte class
  CHECK(again->data == first);
  const CudaAllocatorStats after = cuda_allocator_stats();
  CHECK(after.cache_hits >= before.cache_hits + 1);
  CHECK(after.bytes_in_use >= 1024);
  const CudaMemoryInfo m = cuda_memory_info();
  CHECK(m.total_bytes > 0);
  CHECK(m.free_bytes <= m.total_bytes);
}

TEST_CASE("GPU: host -> device -> host round trip, every dtype", "[cuda]") {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::float32, DType::float64, DType::float16, DType::bfloat16, DType::int32}) {
    Tensor h(dt, {3, 5, 7});
    for (std::int64_t i = 0; i < h.numel(); ++i) h.set(i, static_cast<double>(i % 17) - 8.0);
    const Tensor d = to_device(h, DeviceKind::cuda);
    CHECK(d.device() == DeviceKind::cuda);
    CHECK(d.shape() == h.shape());
    CHECK(to_device(d, DeviceKind::cuda).raw() == d.raw());  // same device: shared
    const Tensor back = to_device(d, DeviceKind::cpu);
    CHECK(back.to_vector() == h.to_vector());
  }
  // A non-contiguous host tensor is made contiguous on the way.
  const Tensor t = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}).permute({1, 0});
  CHECK(to_device(to_device(t, DeviceKind::cuda), DeviceKind::cpu).to_vector() ==
        std::vector<double>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("GPU: owned streams and the event timer", "[cuda]") {
  SKIP_WITHOUT_GPU();
  CudaStream s;
  CHECK(s.get() != nullptr);
  CurrentStreamGuard guard(s.get());
  CudaEventTimer timer;
  timer.start();
  const Tensor d = to_device(Tensor::full(DType::float32, {1 << 20}, 1.0), DeviceKind::cuda);
  timer.stop();
  CHECK(timer.elapsed_ms() >= 0.0);
  s.synchronize();
  CudaEventTimer unused;
  CHECK_THROWS_AS(unused.elapsed_ms(), RuntimeError);
}

namespace {

/// Queues a few milliseconds of GPU work on the current stream that reads `x` (a 4096^2
/// float32 matrix product), so a block freed right after is still in use.
void queue_busy_work(const Tensor& x, Tensor& out) {
  gpu::matmul(x, x, out, {}, {}, {}, 4096, 4096, 4096, nullptr);
}

}  // namespace

TEST_CASE("GPU: a freed block is reused at once on its stream, on another only when its work is done", "[cuda]") {
  SKIP_WITHOUT_GPU();
  CudaStream a, b;
  Tensor x, out;
  {
    CurrentStreamGuard on_a(a.get());
    x = to_device(Tensor::full(DType::float32, {4096, 4096}, 0.5), DeviceKind::cuda);
    out = Tensor(allocate_cuda(x.nbytes()), DType::float32, x.shape());
  }
  constexpr std::size_t kBytes = 3 << 20;  // a size class nothing else here uses
  void* first = nullptr;
  {
    CurrentStreamGuard on_a(a.get());
    auto scratch = allocate_cuda(kBytes);
    first = scratch->data;
    queue_busy_work(x, out);  // work on a, then the scratch is freed while it runs
  }
  {
    CurrentStreamGuard on_b(b.get());
    auto other = allocate_cuda(kBytes);
    CHECK(other->data != first);  // a's work is still queued: not handed to b
  }
  {
    CurrentStreamGuard on_a(a.get());
    queue_busy_work(x, out);
    auto again = allocate_cuda(kBytes);
    CHECK(again->data == first);  // same stream: stream order protects it, no wait
  }
  a.synchronize();
  {
    // b first gets back its own block, then a's, whose work is done now.
    CurrentStreamGuard on_b(b.get());
    auto own = allocate_cuda(kBytes);
    auto from_a = allocate_cuda(kBytes);
    CHECK(own->data != first);
    CHECK(from_a->data == first);
  }
}

TEST_CASE("GPU: destroying a stream releases the library handles bound to it", "[cuda]") {
  SKIP_WITHOUT_GPU();
  const std::size_t before = cuda_live_library_handles();
  {
    CudaStream s;
    CurrentStreamGuard guard(s.get());
    const Tensor m = to_device(Tensor::full(DType::float32, {8, 8}, 1.0), DeviceKind::cuda);
    Tensor out(allocate_cuda(m.nbytes()), DType::float32, m.shape());
    gpu::matmul(m, m, out, {}, {}, {}, 8, 8, 8, nullptr);  // creates a cuBLAS handle for s
    s.synchronize();
    CHECK(cuda_live_library_handles() == before + 1);
  }
  CHECK(cuda_live_library_handles() == before);
}

TEST_CASE("GPU: matmul sizes beyond cuBLAS's int are refused with ValueError", "[cuda]") {
  SKIP_WITHOUT_GPU();
  const Tensor m = to_device(Tensor::full(DType::float32, {2, 2}, 1.0), DeviceKind::cuda);
  Tensor out(allocate_cuda(m.nbytes()), DType::float32, m.shape());
  // Only the checks run: the sizes are refused before cuBLAS sees the (too small) buffers.
  CHECK_THROWS_AS(gpu::matmul(m, m, out, {}, {}, {}, std::int64_t{1} << 31, 2, 2, nullptr), ValueError);
  CHECK_THROWS_WITH(gpu::matmul(m, m, out, {}, {}, {}, 2, std::int64_t{1} << 32, 2, nullptr),
                    Catch::Contains("cuda matmul: k (columns of a) = 4294967296"));
}

// Run in a process of its own by the case below: it corrupts the CUDA context on purpose.
TEST_CASE("GPU child: an illegal address is a DeviceContextError and stops the meta-optimizer", "[.cuda_child]") {
  SKIP_WITHOUT_GPU();
  auto bogus = std::make_shared<Storage>();
  bogus->data = reinterpret_cast<void*>(std::uintptr_t{1} << 40);  // not device memory
  bogus->bytes = 1 << 20;
  bogus->device = DeviceKind::cuda;
  const Tensor bad(bogus, DType::float32, {1 << 18});
  Tensor out(allocate_cuda(bad.nbytes()), DType::float32, bad.shape());
  gpu::unary(detail::UnaryKind::neg, 0, 0, bad, out, nullptr);
  CHECK_THROWS_AS(synchronize_stream(), DeviceContextError);
  CHECK_THROWS_AS(synchronize_stream(), DeviceContextError);  // sticky
  // Tuning a convolution now must fail loudly, not fall back to priority lowering.
  Var x = input(DType::float32, {2, 3, 8, 8}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  CHECK_THROWS_AS(compile({x, w}, {conv2d(x, w)},
                          Mode::from_flags("device=cuda,optimizer_including=conv_meta,metaopt.cache=None")),
                  DeviceContextError);
}

TEST_CASE("GPU: a lost CUDA context raises DeviceContextError and stops tuning (child process)", "[cuda]") {
  SKIP_WITHOUT_GPU();
  CHECK(test::run_test_in_new_process(
            "GPU child: an illegal address is a DeviceContextError and stops the meta-optimizer", {}) == 0);
}

#else

TEST_CASE("cuda_info reports a build without CUDA", "[cuda_device]") {
  const convgraph::CudaInfo& info = convgraph::cuda_info();
  CHECK_FALSE(info.built);
  CHECK_FALSE(info.available);
  CHECK_FALSE(info.reason.empty());
}

#endif
