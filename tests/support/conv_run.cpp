#include "support/conv_run.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "convgraph/backends/cpu/reference.hpp"
#include "convgraph/core/error.hpp"
#include "support/conv_cases.hpp"

namespace convgraph::testing {

ConvOperands make_operands(const ConvProblem& p, std::uint64_t seed, bool integers) {
  auto fill = [&](std::size_t n, std::uint64_t s) {
    return integers ? integer_values(n, s) : random_values(n, s);
  };
  return {fill(x_count(p), seed * 3 + 1), fill(w_count(p), seed * 3 + 2), fill(y_count(p), seed * 3 + 3)};
}

std::vector<double>& output_of(ConvOperands& ops, ConvDirection d) {
  switch (d) {
    case ConvDirection::forward: return ops.y;
    case ConvDirection::grad_inputs: return ops.x;
    case ConvDirection::grad_weights: return ops.w;
  }
  return ops.y;
}
const std::vector<double>& output_of(const ConvOperands& ops, ConvDirection d) {
  return output_of(const_cast<ConvOperands&>(ops), d);
}

namespace {

template <class T>
std::vector<T> typed(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

template <class T>
ConvRun run_typed(const ConvAlgorithm& algo, const ConvProblem& p, const ConvOperands& ops,
                  ThreadPool* pool, std::size_t ws) {
  std::vector<T> x = typed<T>(ops.x), w = typed<T>(ops.w), y = typed<T>(ops.y);
  std::vector<T>* out = p.direction == ConvDirection::forward       ? &y
                        : p.direction == ConvDirection::grad_inputs ? &x
                                                                    : &w;
  std::fill(out->begin(), out->end(), std::numeric_limits<T>::quiet_NaN());
  const std::vector<T> x0 = x, w0 = w, y0 = y;

  ConvRun r;
  r.workspace = ws == SIZE_MAX ? algo.workspace_bytes(p) : ws;
  const std::size_t alloc = (r.workspace + 63) / 64 * 64;
  std::unique_ptr<void, FreeDeleter> buf(alloc ? std::aligned_alloc(64, alloc) : nullptr);
  if (alloc && !buf) throw MemoryError(msg("run_cpu_conv: cannot allocate ", alloc, " bytes"));
  if (alloc) std::memset(buf.get(), 0xff, alloc);  // NaN bytes for float and double

  ConvContext ctx;
  ctx.pool = pool;
  ctx.workspace = buf.get();
  ctx.workspace_bytes = r.workspace;
  algo.run(p, ConvTensors{x.data(), w.data(), y.data(), {}}, ctx);

  r.out.assign(out->begin(), out->end());
  if (out != &x) r.inputs_intact = r.inputs_intact && same_bits(x, x0);
  if (out != &w) r.inputs_intact = r.inputs_intact && same_bits(w, w0);
  if (out != &y) r.inputs_intact = r.inputs_intact && same_bits(y, y0);
  return r;
}

}  // namespace

ConvRun run_cpu_conv(const ConvAlgorithm& algo, const ConvProblem& p, const ConvOperands& ops,
                     ThreadPool* pool, std::size_t workspace_bytes) {
  switch (p.dtype) {
    case DType::float32: return run_typed<float>(algo, p, ops, pool, workspace_bytes);
    case DType::float64: return run_typed<double>(algo, p, ops, pool, workspace_bytes);
    default: throw TypeError(msg("run_cpu_conv: unsupported dtype ", dtype_name(p.dtype)));
  }
}

std::vector<double> reference_output(const ConvProblem& p, const ConvOperands& ops) {
  ConvProblem q = p;
  q.dtype = DType::float64;
  q.compute = DType::float64;
  ConvOperands o = ops;
  std::vector<double>& out = output_of(o, q.direction);
  std::fill(out.begin(), out.end(), std::numeric_limits<double>::quiet_NaN());
  reference_conv(q, ConvTensors{o.x.data(), o.w.data(), o.y.data(), {}});
  return out;
}

}  // namespace convgraph::testing
