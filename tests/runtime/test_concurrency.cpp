// One compiled Function called from several threads at once (a convolution, elementwise
// ops and a reduction): every call gets the single-threaded answer for its own inputs,
// with profiling on and off, while another thread reads peak_bytes() and profile().
// Also two Functions compiled from one graph running side by side. Run it under TSan too
// (README, "Thread safety").
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include <convgraph/convgraph.hpp>

using namespace convgraph;

namespace {

constexpr int kThreads = 4;
constexpr int kCallsPerThread = 200;
constexpr int kInputs = 16;  // distinct inputs, cycled through

struct Net {
  Var x = input(DType::float32, {2, 3, 10, 10}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var y = conv2d(x, w, {.border_mode = "half", .name = "conv"});
  Var z = relu(y) * 0.5 + tanh(y);       // elementwise (fused or not)
  Var r = sum(z * z, {1, 2, 3});          // a reduction per batch element
};

std::vector<Tensor> make_inputs(int k) {
  Tensor x(DType::float32, {2, 3, 10, 10}), w(DType::float32, {4, 3, 3, 3});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, std::sin(0.37 * static_cast<double>(i) + k));
  for (std::int64_t i = 0; i < w.numel(); ++i) w.set(i, 0.1 * std::cos(0.11 * static_cast<double>(i) * (k + 1)));
  return {x, w};
}

bool close(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (!(std::abs(x - y) <= 1e-5 * (1 + std::abs(y)))) return false;
  }
  return true;
}

/// Calls `f` from kThreads threads, kCallsPerThread times each, on inputs cycled by
/// thread and call, and checks every result against `want`. A reader thread polls the
/// accessors meanwhile. Returns the number of mismatching calls.
int hammer(const Function& f, const std::vector<std::vector<Tensor>>& inputs,
           const std::vector<std::vector<Tensor>>& want) {
  std::atomic<int> bad{0}, errors{0};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    std::size_t seen = 0;
    while (!done.load()) {
      seen += f.peak_bytes() + f.total_intermediate_bytes();
      const ProfileStats p = f.profile();
      seen += p.nodes.size() + static_cast<std::size_t>(p.calls) + p.summary().size() + p.chrome_trace.size();
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // poll; leave the cores to the callers
    }
    (void)seen;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCallsPerThread; ++c) {
        const int k = (t * 7 + c) % kInputs;
        try {
          const auto out = f(inputs[static_cast<std::size_t>(k)]);
          const auto& exp = want[static_cast<std::size_t>(k)];
          if (out.size() != exp.size() || !close(out[0], exp[0]) || !close(out[1], exp[1])) ++bad;
        } catch (...) {
          ++errors;
        }
      }
    });
  for (auto& t : threads) t.join();
  done = true;
  reader.join();
  CHECK(errors.load() == 0);
  return bad.load();
}

void check_concurrent_calls(const Mode& mode) {
  Net n;
  Function f = compile({n.x, n.w}, {n.z, n.r}, mode);
  std::vector<std::vector<Tensor>> inputs, want;
  for (int k = 0; k < kInputs; ++k) {
    inputs.push_back(make_inputs(k));
    want.push_back(f(inputs.back()));  // single-threaded answers
  }
  // Different inputs give different answers (the check below means something).
  REQUIRE_FALSE(close(want[0][1], want[1][1]));
  CHECK(hammer(f, inputs, want) == 0);
  const ProfileStats p = f.profile();
  CHECK(p.calls == kInputs + kThreads * kCallsPerThread);
  if (mode.profile) {
    REQUIRE_FALSE(p.nodes.empty());
    for (const auto& node : p.nodes) CHECK(node.calls == p.calls);
  }
  CHECK(f.total_intermediate_bytes() >= f.peak_bytes());
}

}  // namespace

TEST_CASE("concurrency: one Function called from 4 threads gives the single-threaded results", "[runtime][threads]") {
  check_concurrent_calls(Mode::fast_run());
}

TEST_CASE("concurrency: the same with profile=True, accessors polled meanwhile", "[runtime][threads]") {
  check_concurrent_calls(Mode::fast_run().with_flags("profile=True"));
}

TEST_CASE("concurrency: the same without fusion (more intermediates in the shared arena)", "[runtime][threads]") {
  check_concurrent_calls(Mode::fast_run().excluding("fusion"));
}

TEST_CASE("concurrency: Functions compiled from one graph run side by side", "[runtime][threads]") {
  Net n;
  const Function a = compile({n.x, n.w}, {n.z, n.r}, Mode::fast_run());
  const Function b = compile({n.x, n.w}, {n.z, n.r}, Mode::fast_run().with_flags("profile=True"));
  std::vector<std::vector<Tensor>> inputs, want;
  for (int k = 0; k < kInputs; ++k) {
    inputs.push_back(make_inputs(k));
    want.push_back(a(inputs.back()));
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const Function& f = t % 2 ? b : a;
      for (int c = 0; c < kCallsPerThread / 2; ++c) {
        const int k = (t * 5 + c) % kInputs;
        const auto out = f(inputs[static_cast<std::size_t>(k)]);
        if (!close(out[0], want[static_cast<std::size_t>(k)][0]) || !close(out[1], want[static_cast<std::size_t>(k)][1]))
          ++bad;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(bad.load() == 0);
}
