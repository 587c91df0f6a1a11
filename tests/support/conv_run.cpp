#include "support/conv_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "convgraph/backends/cpu/reference.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/core/tensor.hpp"
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

std::vector<double> run_cpu_conv_host(const ConvAlgorithm& algo, const ConvProblem& p, const ConvOperands& ops,
                                      ThreadPool* pool) {
  if (p.dtype != DType::float32) throw TypeError(msg("run_cpu_conv_host: float32 only, got ", dtype_name(p.dtype)));
  const std::vector<double>* in[3] = {&ops.x, &ops.w, &ops.y};
  const std::vector<double>& written = output_of(ops, p.direction);
  std::shared_ptr<Storage> bufs[3];
  float* out = nullptr;
  for (int i = 0; i < 3; ++i) {
    bufs[i] = allocate_host(std::max<std::size_t>(1, in[i]->size()) * sizeof(float));
    auto* f = static_cast<float*>(bufs[i]->data);
    const bool is_out = in[i] == &written;
    for (std::size_t k = 0; k < in[i]->size(); ++k)
      f[k] = is_out ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>((*in[i])[k]);
    if (is_out) out = f;
  }
  const std::size_t ws_bytes = algo.workspace_bytes(p);
  std::shared_ptr<Storage> ws = ws_bytes ? allocate_host(ws_bytes) : nullptr;
  ConvContext ctx;
  ctx.pool = pool;
  ctx.workspace = ws ? ws->data : nullptr;
  ctx.workspace_bytes = ws_bytes;
  algo.run(p, ConvTensors{bufs[0]->data, bufs[1]->data, bufs[2]->data, {}}, ctx);
  return std::vector<double>(out, out + written.size());
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
