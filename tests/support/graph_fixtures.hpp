#pragma once
// Small fixtures the graph-level tests share: reproducible operand values, a Mode that
// leaves one convolution algorithm, the fused convolution of a compiled function, and a
// rank-dispatched convolution builder.
#include <cstdint>
#include <string>

#include <convgraph/convgraph.hpp>
#include <convgraph/optimizer/conv_impl_op.hpp>

namespace convgraph::testing {

/// Values uniform in [lo, hi) from a 64-bit LCG seeded by `seed` (the same on every machine).
inline Tensor noise(DType t, Shape s, unsigned seed, double lo = -2, double hi = 2) {
  Tensor x(t, std::move(s));
  std::uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x.set(i, lo + (hi - lo) * (static_cast<double>(state >> 11) / 9007199254740992.0));
  }
  return x;
}

/// `base` with every convolution algorithm but `algo` excluded.
inline Mode only_algorithm(const std::string& algo, Mode base = Mode::fast_run()) {
  Mode m = base.including(algo);
  for (const auto& a : AlgorithmRegistry::builtin().all())
    if (a->name() != algo) m = m.excluding(a->name());
  return m;
}

/// The first convolution of f with a fused epilogue, or nullptr.
inline const ConvImplOp* fused_conv(const Function& f) {
  for (const auto& v : f.graph().toposort())
    if (const ConvImplOp* c = as_conv_impl(v); c && !c->epilogue().empty()) return c;
  return nullptr;
}

/// conv1d / conv2d / conv3d by x's rank.
inline Var conv_nd(const Var& x, const Var& w, const ConvOptions& o) {
  switch (x.rank()) {
    case 3: return conv1d(x, w, o);
    case 4: return conv2d(x, w, o);
    default: return conv3d(x, w, o);
  }
}

}  // namespace convgraph::testing
