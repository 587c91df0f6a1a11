// The elementwise loops, compiled once per CPU level: unary and binary rows of
// ops/elementwise_table.hpp over contiguous runs, plus the select and float conversion the
// fused interpreter needs. The unfused kernels (backends/cpu/elementwise_kernels.cpp) and
// the fused interpreter (backends/cpu/fused_elementwise.cpp) both run these, so a formula
// gives the same bits fused or not. Each row gets its own loop (ew::visit_*), which the
// compiler vectorises where the formula allows; the formulas themselves are defined before
// isa_begin.hpp and inlined here, so their instances shared between levels hold no
// level-specific code.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "convgraph/core/dtype.hpp"
#include "convgraph/core/error.hpp"
#include "core/dtype_dispatch.hpp"
#include "ops/elementwise_table.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

void ew_unary(detail::UnaryKind k, DType t, const void* xv, void* yv, std::int64_t n, double pa, double pb) {
  detail::dispatch_dtype(t, detail::unary_traits(k).name, [&](auto z) {
    using T = decltype(z);
    const T* x = static_cast<const T*>(xv);
    T* y = static_cast<T*>(yv);
    ew::visit_unary(k, [&](auto fn) {
      using Fn = decltype(fn);
      if constexpr (ew::unary_applies<T>(Fn::kind)) {
        const T a = static_cast<T>(pa), b = static_cast<T>(pb);
        for (std::int64_t i = 0; i < n; ++i) y[i] = Fn::apply(x[i], a, b);
      } else {
        throw TypeError(msg(detail::unary_traits(k).name, ": no kernel for ", dtype_name(t), " input"));
      }
    });
    return 0;
  });
}

namespace {

// One loop per stride pattern, so the common cases (same shape, a scalar operand) are
// unit-stride loops the compiler vectorises (restrict: a comparison's bool output could
// alias anything, else; in place is fine, each element is read before it is written).
template <class T, class O, class F>
void run_rows(const T* __restrict x, bool xs, const T* __restrict y, bool ys, O* __restrict o, std::int64_t n, F f) {
  if (xs && ys) for (std::int64_t j = 0; j < n; ++j) o[j] = f(x[j], y[j]);
  else if (xs) for (std::int64_t j = 0; j < n; ++j) o[j] = f(x[j], y[0]);
  else if (ys) for (std::int64_t j = 0; j < n; ++j) o[j] = f(x[0], y[j]);
  else for (std::int64_t j = 0; j < n; ++j) o[j] = f(x[0], y[0]);
}

}  // namespace

void ew_binary(detail::BinaryKind k, DType t, const void* xv, bool x_step, const void* yv, bool y_step, void* out,
               std::int64_t n) {
  detail::dispatch_dtype(t, detail::binary_traits(k).name, [&](auto z) {
    using T = decltype(z);
    const T* x = static_cast<const T*>(xv);
    const T* y = static_cast<const T*>(yv);
    ew::visit_binary(k, [&](auto fn) {
      using Fn = decltype(fn);
      constexpr detail::BinaryRule rule = detail::binary_traits(Fn::kind).rule;
      if constexpr (rule == detail::BinaryRule::compare) {
        run_rows(x, x_step, y, y_step, static_cast<bool*>(out), n, [](T a, T b) { return Fn::apply(a, b); });
      } else if constexpr (std::is_same_v<T, bool> && rule == detail::BinaryRule::arith) {
        throw TypeError(msg(detail::binary_traits(k).name, ": arithmetic on bool tensors; cast them first"));
      } else {
        run_rows(x, x_step, y, y_step, static_cast<T*>(out), n, [](T a, T b) { return static_cast<T>(Fn::apply(a, b)); });
      }
    });
    return 0;
  });
}

// A bit mask per element instead of c ? a : b, which g++ compiled to a branch: relu's
// gradient selects on the sign of its output, which random data mispredicts on every other
// element (a 2 MiB where took ~9 ms, 20x a pass over memory). The bits are selected as
// they are, so NaN payloads and signed zeros pass unchanged. The pointers are restrict
// parameters, else g++ kept the loop scalar; an output that is an input (in place) still works, as
// every element is read before it is written.
template <class U>
void select_bits(const unsigned char* __restrict c, const U* __restrict a, const U* __restrict b, U* __restrict y,
                 std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const U m = U(0) - static_cast<U>(c[i]);
    y[i] = (a[i] & m) | (b[i] & ~m);
  }
}

void ew_select(const bool* c, const void* a, const void* b, void* y, std::int64_t n, bool f64) {
  const auto* pc = reinterpret_cast<const unsigned char*>(c);
  if (f64)
    select_bits(pc, static_cast<const std::uint64_t*>(a), static_cast<const std::uint64_t*>(b), static_cast<std::uint64_t*>(y), n);
  else
    select_bits(pc, static_cast<const std::uint32_t*>(a), static_cast<const std::uint32_t*>(b), static_cast<std::uint32_t*>(y), n);
}

void ew_float_convert(const void* x, bool from_f64, void* y, std::int64_t n) {
  if (from_f64) {
    const double* px = static_cast<const double*>(x);
    float* py = static_cast<float*>(y);
    for (std::int64_t i = 0; i < n; ++i) py[i] = static_cast<float>(px[i]);
  } else {
    const float* px = static_cast<const float*>(x);
    double* py = static_cast<double*>(y);
    for (std::int64_t i = 0; i < n; ++i) py[i] = static_cast<double>(px[i]);
  }
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS

#include "backends/cpu/kernels/isa_end.hpp"
