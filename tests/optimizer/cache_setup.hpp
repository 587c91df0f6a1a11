#pragma once
// Shared by the tuning-cache tests: a registry of two fake algorithms on a fake clock
// (fake.fast wins), a mode tuning into a given cache file, and a net with two convs.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fakes.hpp"

namespace convgraph::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

struct Setup {
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  AlgorithmRegistry reg;
  std::shared_ptr<FakeAlgorithm> slow, fast;
  std::vector<std::string> log;
  Setup() {
    slow = std::make_shared<FakeAlgorithm>("fake.slow", std::vector<std::string>{"conv_gemm", "fast_run"}, 5e-2, clock);
    fast = std::make_shared<FakeAlgorithm>("fake.fast", std::vector<std::string>{"conv_direct", "fast_run"}, 2e-2, clock);
    reg.add(slow);
    reg.add(fast);
  }
  /// `extra`: more flags, e.g. ",threads=1".
  Mode mode(const std::string& cache, const std::string& extra = "") {
    Mode m = Mode::from_flags("optimizer_including=conv_meta,metaopt.verbose=1,metaopt.cache=" + cache + extra);
    m.registry = &reg;
    m.metaopt_clock = clock;
    m.log = [this](const std::string& l) { log.push_back(l); };
    return m;
  }
  int runs() const { return slow->runs + fast->runs; }
  std::string text() const {
    std::string s;
    for (const auto& l : log) s += l + "\n";
    return s;
  }
};

inline std::vector<std::string> compile_net(const Mode& m, std::vector<std::int64_t> xshape = {2, 3, 8, 8},
                                            DType dtype = DType::float32) {
  Var x = input(dtype, xshape, "x");
  Var w = input(dtype, {4, 3, 3, 3}, "w");
  Var y1 = conv2d(x, w, {.name = "c1"});
  Var y2 = conv2d(x, w, {.border_mode = "half", .name = "c2"});
  return chosen(optimized({x, w}, {y1, y2}, m));
}

inline ConvProblem problem(DType dtype = DType::float32) {
  return ConvProblem::make(ConvDirection::forward, ConvParams{}, {2, 3, 8, 8}, {4, 3, 3, 3}, dtype);
}

/// Writes `n` distinct entries through its own TuningCache, one save each.
inline void write_entries(const std::string& path, const std::string& tag, int n) {
  for (int i = 0; i < n; ++i) {
    TuningCache c(path, [](const std::string&) {});
    c.load();
    c.put(tag + std::to_string(i) + "\tp\tc", TuningEntry{"algo." + tag, 1, 0.001 * i});
    c.save();
  }
}

/// The entries of the cache file at `path`; REQUIREs that it parses.
inline TuningCache::Entries parsed_file(const std::string& path) {
  TuningCache::Entries e;
  std::string err;
  const bool ok = TuningCache::parse(slurp(path), e, err);
  INFO(path << ": " << err);
  REQUIRE(ok);
  return e;
}

}  // namespace convgraph::testing
