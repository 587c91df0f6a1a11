// Elementwise ops: unary math, binary arithmetic/comparison with numpy broadcasting,
// where, and cast. Each op kind is one row of a table: name, kernel, gradient.
#include <cmath>

#include "backends/cuda/op_kernels.hpp"
#include "convgraph/ops/math.hpp"
#include "ops/broadcast_iter.hpp"
#include "ops/elementwise_info.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph {

using detail::dispatch_dtype;
using detail::parallel_range;

namespace {

constexpr std::int64_t kGrain = 1 << 14;  // elements per parallel task

// ---- unary ------------------------------------------------------------------------

using detail::UnaryKind;  // the kind lists live in ops/elementwise_info.hpp

const char* unary_name(UnaryKind k) {
  constexpr const char* names[] = {"neg", "exp", "log", "sqrt", "abs", "sign", "relu", "sigmoid", "tanh"};
  return names[static_cast<int>(k)];
}

bool unary_needs_float(UnaryKind k) {
  return k == UnaryKind::exp || k == UnaryKind::log || k == UnaryKind::sqrt || k == UnaryKind::sigmoid ||
         k == UnaryKind::tanh;
}

template <class T, class F>
void map_unary(const Tensor& a, Tensor& out, const ExecContext& ctx, F f) {
  const T* x = a.data<T>();
  T* y = out.data<T>();
  parallel_range(ctx, a.numel(), kGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

class UnaryOp final : public Op {
 public:
  explicit UnaryOp(UnaryKind k) : kind_(k) {}
  UnaryKind kind() const { return kind_; }
  std::string name() const override { return unary_name(kind_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 1) throw ValueError(msg(name(), ": expects 1 input, got ", in.size()));
    if (in[0].dtype == DType::boolean || (unary_needs_float(kind_) && !is_float(in[0].dtype)))
      throw TypeError(msg(name(), ": input must be ", unary_needs_float(kind_) ? "a float tensor" : "numeric",
                          ", got ", in[0].to_string()));
    return in[0];
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override {
    const Var& x = in[0];
    if (!is_float(x.dtype())) return {Var()};
    switch (kind_) {
      case UnaryKind::neg: return {-g};
      case UnaryKind::exp: return {g * out};
      case UnaryKind::log: return {g / x};
      case UnaryKind::sqrt: return {g / (out * 2.0)};
      case UnaryKind::abs: return {g * sign(x)};
      case UnaryKind::sign: return {zeros_like(x)};
      case UnaryKind::relu: return {where(x > 0.0, g, zeros_like(g))};
      case UnaryKind::sigmoid: return {g * out * (1.0 - out)};
      case UnaryKind::tanh: return {g * (1.0 - out * out)};
    }
    return {Var()};
  }
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>& in) const override {
    return d == DeviceKind::cuda && gpu::elementwise_dtype_supported(in[0].dtype) && in[0].dtype != DType::boolean;
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::unary(name(), in[0], out, ctx.stream);
    dispatch_dtype(in[0].dtype(), "unary", [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_same_v<T, bool>) {
        throw TypeError(msg(name(), ": bool input"));
      } else {
        switch (kind_) {
          case UnaryKind::neg: map_unary<T>(in[0], out, ctx, [](T v) { return static_cast<T>(-v); }); break;
          case UnaryKind::abs: map_unary<T>(in[0], out, ctx, [](T v) { return v < 0 ? static_cast<T>(-v) : v; }); break;
          case UnaryKind::sign: map_unary<T>(in[0], out, ctx, [](T v) { return static_cast<T>((v > 0) - (v < 0)); }); break;
          case UnaryKind::relu: map_unary<T>(in[0], out, ctx, [](T v) { return v > 0 ? v : T(0); }); break;
          default:
            if constexpr (std::is_floating_point_v<T>) {
              switch (kind_) {
                case UnaryKind::exp: map_unary<T>(in[0], out, ctx, [](T v) { return std::exp(v); }); break;
                case UnaryKind::log: map_unary<T>(in[0], out, ctx, [](T v) { return std::log(v); }); break;
                case UnaryKind::sqrt: map_unary<T>(in[0], out, ctx, [](T v) { return std::sqrt(v); }); break;
                case UnaryKind::tanh: map_unary<T>(in[0], out, ctx, [](T v) { return std::tanh(v); }); break;
                case UnaryKind::sigmoid:
                  // Stable for large |v|: never exponentiates a large positive number.
                  map_unary<T>(in[0], out, ctx, [](T v) {
                    return v >= 0 ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
                  });
                  break;
                default: break;
              }
            }
        }
      }
      return 0;
    });
  }

 private:
  UnaryKind kind_;
};

Var unary(UnaryKind k, const Var& x) { return apply(std::make_shared<UnaryOp>(k), {x}); }

// ---- binary -----------------------------------------------------------------------

using detail::BinaryKind;

const char* binary_name(BinaryKind k) {
  constexpr const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                   "lt",  "le",  "gt",  "ge",  "eq",  "ne"};
  return names[static_cast<int>(k)];
}
bool is_comparison(BinaryKind k) { return k >= BinaryKind::lt; }

template <class T>
T binary_scalar(BinaryKind k, T a, T b) {
  switch (k) {
    case BinaryKind::add: return a + b;
    case BinaryKind::sub: return a - b;
    case BinaryKind::mul: return a * b;
    case BinaryKind::div: return a / b;
    case BinaryKind::pow:
      if constexpr (std::is_floating_point_v<T>) return std::pow(a, b);
      else return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
    case BinaryKind::maximum: return a > b || a != a ? a : b;  // NaN propagates
    case BinaryKind::minimum: return a < b || a != a ? a : b;
    default: return T{};
  }
}

template <class T>
bool compare_scalar(BinaryKind k, T a, T b) {
  switch (k) {
    case BinaryKind::lt: return a < b;
    case BinaryKind::le: return a <= b;
    case BinaryKind::gt: return a > b;
    case BinaryKind::ge: return a >= b;
    case BinaryKind::eq: return a == b;
    case BinaryKind::ne: return a != b;
    default: return false;
  }
}

class BinaryOp final : public Op {
 public:
  explicit BinaryOp(BinaryKind k) : kind_(k) {}
  BinaryKind kind() const { return kind_; }
  std::string name() const override { return binary_name(kind_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 2) throw ValueError(msg(name(), ": expects 2 inputs, got ", in.size()));
    if (in[0].dtype != in[1].dtype)
      throw TypeError(msg(name(), ": operands have different dtypes ", in[0].to_string(), " and ", in[1].to_string(),
                          " (the DSL inserts casts; direct users must cast)"));
    if (!is_comparison(kind_) && kind_ != BinaryKind::maximum && kind_ != BinaryKind::minimum &&
        in[0].dtype == DType::boolean)
      throw TypeError(msg(name(), ": arithmetic on bool tensors; cast them first"));
    TensorType out = in[0];
    out.shape = detail::broadcast_shapes(in[0].shape, in[1].shape, name());
    if (is_comparison(kind_)) out.dtype = DType::boolean;
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override {
    const Var& a = in[0];
    const Var& b = in[1];
    if (is_comparison(kind_) || !is_float(a.dtype())) return {Var(), Var()};
    auto to_a = [&](const Var& v) { return sum_to(v, a); };
    auto to_b = [&](const Var& v) { return sum_to(v, b); };
    // Each operand's gradient is summed over the axes along which it was broadcast.
    switch (kind_) {
      case BinaryKind::add: return {sum_to(g, a), sum_to(g, b)};
      case BinaryKind::sub: return {sum_to(g, a), sum_to(-g, b)};
      case BinaryKind::mul: return {to_a(g * b), to_b(g * a)};
      case BinaryKind::div: return {to_a(g / b), to_b(-(g * out) / b)};
      case BinaryKind::pow: return {to_a(g * b * pow(a, b - 1.0)), to_b(g * out * log(a))};
      case BinaryKind::maximum: {
        const Var pick_a = ge(a, b);
        return {to_a(where(pick_a, g, zeros_like(g))), to_b(where(pick_a, zeros_like(g), g))};
      }
      case BinaryKind::minimum: {
        const Var pick_a = le(a, b);
        return {to_a(where(pick_a, g, zeros_like(g))), to_b(where(pick_a, zeros_like(g), g))};
      }
      default: return {Var(), Var()};
    }
  }
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>& in) const override {
    return d == DeviceKind::cuda && gpu::elementwise_dtype_supported(in[0].dtype);
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::binary(name(), in[0], in[1], out, ctx.stream);
    dispatch_dtype(in[0].dtype(), "binary", [&](auto z) {
      using T = decltype(z);
      if (is_comparison(kind_)) {
        detail::broadcast_apply<T, T, bool>(in[0], in[1], out, ctx,
                                            [k = kind_](T a, T b) { return compare_scalar(k, a, b); });
        return 0;
      }
      if constexpr (!std::is_same_v<T, bool>) {
        switch (kind_) {  // the common kinds get their own loop so they vectorise
          case BinaryKind::add: detail::broadcast_apply<T, T, T>(in[0], in[1], out, ctx, [](T a, T b) { return a + b; }); break;
          case BinaryKind::sub: detail::broadcast_apply<T, T, T>(in[0], in[1], out, ctx, [](T a, T b) { return a - b; }); break;
          case BinaryKind::mul: detail::broadcast_apply<T, T, T>(in[0], in[1], out, ctx, [](T a, T b) { return a * b; }); break;
          case BinaryKind::div:
            if constexpr (std::is_integral_v<T>) {
              detail::broadcast_apply<T, T, T>(in[0], in[1], out, ctx, [](T a, T b) {
                if (b == 0) throw ValueError("div: integer division by zero");
                return a / b;
              });
            } else {
              detail::broadcast_apply<T, T, T>(in[0], in[1], out, ctx, [](T a, T b) { return a / b; });
            }
            break;
          default:
            detail::broadcast_apply<T, T, T>(in[0], in[1], out, ctx,
                                             [k = kind_](T a, T b) { return binary_scalar(k, a, b); });
        }
      } else {
        detail::broadcast_apply<bool, bool, bool>(in[0], in[1], out, ctx, [k = kind_](bool a, bool b) {
          return k == BinaryKind::maximum ? (a || b) : (a && b);
        });
      }
      return 0;
    });
  }

 private:
  BinaryKind kind_;
};

// Brings both operands to a common dtype, as numpy promotion does. True division of
// integers gives float64.
Var binary(BinaryKind k, Var a, Var b) {
  DType t = promote(a.dtype(), b.dtype());
  if ((k == BinaryKind::div || k == BinaryKind::pow) && !is_float(t)) t = DType::float64;
  if (a.dtype() != t) a = cast(a, t);
  if (b.dtype() != t) b = cast(b, t);
  return apply(std::make_shared<BinaryOp>(k), {a, b});
}

// A C++ number next to a Var takes the Var's dtype (floats stay float32).
Var number_like(double v, const Var& like) {
  if (!like.defined()) throw ValueError("arithmetic with an undefined variable");
  return scalar(v, like.dtype() == DType::boolean ? DType::float32 : like.dtype());
}

// ---- where, cast --------------------------------------------------------------------

class WhereOp final : public Op {
 public:
  std::string name() const override { return "where"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 3) throw ValueError(msg("where: expects 3 inputs, got ", in.size()));
    if (in[0].dtype != DType::boolean) throw TypeError(msg("where: condition must be bool, got ", in[0].to_string()));
    if (in[1].dtype != in[2].dtype)
      throw TypeError(msg("where: branches have different dtypes ", in[1].to_string(), " and ", in[2].to_string()));
    TensorType out = in[1];
    out.shape = detail::broadcast_shapes(detail::broadcast_shapes(in[0].shape, in[1].shape, "where"), in[2].shape, "where");
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    if (!is_float(in[1].dtype())) return {Var(), Var(), Var()};
    const Var zero = zeros_like(g);
    return {Var(), sum_to(where(in[0], g, zero), in[1]), sum_to(where(in[0], zero, g), in[2])};
  }
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>&) const override { return d == DeviceKind::cuda; }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::where(in[0], in[1], in[2], out, ctx.stream);
    dispatch_dtype(in[1].dtype(), "where", [&](auto z) {
      using T = decltype(z);
      detail::broadcast_apply3<T>(in[0], in[1], in[2], out, ctx);
      return 0;
    });
  }
};

class CastOp final : public Op {
 public:
  explicit CastOp(DType to) : to_(to) {}
  DType to() const { return to_; }
  std::string name() const override { return "cast"; }
  std::string params() const override { return std::string(dtype_name(to_)); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 1) throw ValueError(msg("cast: expects 1 input, got ", in.size()));
    TensorType out = in[0];
    out.dtype = to_;
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    if (!is_float(in[0].dtype()) || !is_float(to_)) return {Var()};
    return {cast(g, in[0].dtype())};
  }
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>&) const override { return d == DeviceKind::cuda; }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::cast(in[0], out, ctx.stream);
    out.copy_from(in[0]);
  }

 private:
  DType to_;
};

}  // namespace

detail::ElementwiseInfo detail::elementwise_info(const Op& op) {
  using C = ElementwiseInfo::Class;
  ElementwiseInfo info;
  if (auto* u = dynamic_cast<const UnaryOp*>(&op)) info = {C::unary, 1, u->kind()};
  else if (auto* b = dynamic_cast<const BinaryOp*>(&op)) info = {C::binary, 2, UnaryKind::neg, b->kind()};
  else if (dynamic_cast<const WhereOp*>(&op)) info = {C::where, 3};
  else if (auto* c = dynamic_cast<const CastOp*>(&op)) info = {C::cast, 1, UnaryKind::neg, BinaryKind::add, c->to()};
  return info;
}

Var operator+(const Var& a, const Var& b) { return binary(BinaryKind::add, a, b); }
Var operator-(const Var& a, const Var& b) { return binary(BinaryKind::sub, a, b); }
Var operator*(const Var& a, const Var& b) { return binary(BinaryKind::mul, a, b); }
Var operator/(const Var& a, const Var& b) { return binary(BinaryKind::div, a, b); }
Var operator-(const Var& a) { return unary(UnaryKind::neg, a); }
Var operator+(const Var& a, double b) { return a + number_like(b, a); }
Var operator-(const Var& a, double b) { return a - number_like(b, a); }
Var operator*(const Var& a, double b) { return a * number_like(b, a); }
Var operator/(const Var& a, double b) { return a / number_like(b, a); }
Var operator+(double a, const Var& b) { return number_like(a, b) + b; }
Var operator-(double a, const Var& b) { return number_like(a, b) - b; }
Var operator*(double a, const Var& b) { return number_like(a, b) * b; }
Var operator/(double a, const Var& b) { return number_like(a, b) / b; }

Var pow(const Var& a, const Var& b) { return binary(BinaryKind::pow, a, b); }
Var pow(const Var& a, double b) { return pow(a, number_like(b, a)); }
Var exp(const Var& x) { return unary(UnaryKind::exp, x); }
Var log(const Var& x) { return unary(UnaryKind::log, x); }
Var sqrt(const Var& x) { return unary(UnaryKind::sqrt, x); }
Var abs(const Var& x) { return unary(UnaryKind::abs, x); }
Var sign(const Var& x) { return unary(UnaryKind::sign, x); }
Var relu(const Var& x) { return unary(UnaryKind::relu, x); }
Var sigmoid(const Var& x) { return unary(UnaryKind::sigmoid, x); }
Var tanh(const Var& x) { return unary(UnaryKind::tanh, x); }
Var maximum(const Var& a, const Var& b) { return binary(BinaryKind::maximum, a, b); }
Var minimum(const Var& a, const Var& b) { return binary(BinaryKind::minimum, a, b); }

Var lt(const Var& a, const Var& b) { return binary(BinaryKind::lt, a, b); }
Var le(const Var& a, const Var& b) { return binary(BinaryKind::le, a, b); }
Var gt(const Var& a, const Var& b) { return binary(BinaryKind::gt, a, b); }
Var ge(const Var& a, const Var& b) { return binary(BinaryKind::ge, a, b); }
Var eq(const Var& a, const Var& b) { return binary(BinaryKind::eq, a, b); }
Var ne(const Var& a, const Var& b) { return binary(BinaryKind::ne, a, b); }
Var operator<(const Var& a, const Var& b) { return lt(a, b); }
Var operator<=(const Var& a, const Var& b) { return le(a, b); }
Var operator>(const Var& a, const Var& b) { return gt(a, b); }
Var operator>=(const Var& a, const Var& b) { return ge(a, b); }
Var operator<(const Var& a, double b) { return lt(a, number_like(b, a)); }
Var operator>(const Var& a, double b) { return gt(a, number_like(b, a)); }

Var where(const Var& cond, const Var& a, const Var& b) {
  if (!cond.defined() || !a.defined() || !b.defined()) throw ValueError("where: undefined operand");
  const DType t = promote(a.dtype(), b.dtype());
  return apply(std::make_shared<WhereOp>(), {cond, a.dtype() == t ? a : cast(a, t), b.dtype() == t ? b : cast(b, t)});
}

Var cast(const Var& x, DType dtype) {
  if (!x.defined()) throw ValueError("cast: undefined variable");
  if (x.dtype() == dtype) return x;
  return apply(std::make_shared<CastOp>(dtype), {x});
}

}  // namespace convgraph
