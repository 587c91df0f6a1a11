// Elementwise ops: unary math, binary arithmetic/comparison with numpy broadcasting,
// where, and cast. The unary and binary ops are expanded from the rows of
// ops/elementwise_table.hpp: name, dtype rule, parameters, gradient, DSL function. Their
// kernels are registered per device under the ops' keys (backends/cpu/elementwise_kernels.cpp,
// backends/cuda/op_kernels.cpp).
#include <charconv>
#include <cmath>

#include "convgraph/ops/math.hpp"
#include "ops/elementwise_info.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph {


namespace {

// ---- unary ------------------------------------------------------------------------
//
// Every unary op is one row of CONVGRAPH_UNARY_OPS (ops/elementwise_table.hpp): its name,
// dtype rule, parameters, formula and gradient are expanded here from the row.

using detail::UnaryKind;
using detail::unary_traits;

// Shortest text that reads back as the same double ("0.01", not "0.01000000000000000021").
std::string number_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

bool unary_check(UnaryKind k, double a, double b) {
  switch (k) {
#define CONVGRAPH_EW_CHECK(id, rule, n, p0, p1, check, ...) \
  case UnaryKind::id: return (check);
    CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_CHECK)
#undef CONVGRAPH_EW_CHECK
  }
  return true;
}

const char* unary_check_why(UnaryKind k) {
  switch (k) {
#define CONVGRAPH_EW_WHY(id, rule, n, p0, p1, check, why, ...) \
  case UnaryKind::id: return why;
    CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_WHY)
#undef CONVGRAPH_EW_WHY
  }
  return "";
}

class UnaryOp final : public Op {
 public:
  UnaryOp(UnaryKind k, double a, double b) : kind_(k) {
    const auto& tr = unary_traits(k);
    const double given[2] = {a, b};
    for (int i = 0; i < tr.params; ++i) {
      if (!std::isfinite(given[i]))
        throw ValueError(msg(tr.name, ": parameter ", tr.param[i], " must be finite, got ", given[i]));
      p_[i] = given[i];
    }
    if (!unary_check(k, p_[0], p_[1])) throw ValueError(msg(tr.name, ": ", unary_check_why(k), "; got ", params()));
  }
  UnaryKind kind() const { return kind_; }
  double param(int i) const { return p_[i]; }
  std::string name() const override { return unary_traits(kind_).name; }
  /// "alpha=0.01", "lo=0,hi=6": equal ops have equal text (CSE merges them).
  std::string params() const override {
    const auto& tr = unary_traits(kind_);
    std::string s;
    for (int i = 0; i < tr.params; ++i) s += msg(i ? "," : "", tr.param[i], "=", number_text(p_[i]));
    return s;
  }
  TensorType infer(const std::vector<TensorType>& in) const override {
    const auto& tr = unary_traits(kind_);
    if (in.size() != 1) throw ValueError(msg(name(), ": expects 1 input, got ", in.size()));
    const bool floating = tr.rule == detail::UnaryRule::floating;
    if (in[0].dtype == DType::boolean || (floating && !is_float(in[0].dtype)))
      throw TypeError(msg(name(), ": input must be ", floating ? "a float tensor" : "numeric", ", got ",
                          in[0].to_string()));
    // An integer tensor takes its parameters converted to its type: only whole numbers.
    for (int i = 0; i < tr.params; ++i)
      if (!is_float(in[0].dtype) && p_[i] != std::trunc(p_[i]))
        throw TypeError(msg(name(), ": parameter ", tr.param[i], "=", number_text(p_[i]),
                            " is not a whole number, but the input is ", in[0].to_string()));
    return in[0];
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override {
    const Var& x = in[0];
    if (!is_float(x.dtype())) return {Var()};
    const double a = p_[0], b = p_[1];
    (void)out, (void)a, (void)b;
    switch (kind_) {
#define CONVGRAPH_EW_GRAD(id, rule, n, p0, p1, check, why, formula, gradient) \
  case UnaryKind::id: return {gradient};
      CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_GRAD)
#undef CONVGRAPH_EW_GRAD
    }
    return {Var()};
  }
  std::string_view kernel_key() const override { return "elementwise.unary"; }

 private:
  UnaryKind kind_;
  double p_[2] = {0, 0};
};

// ---- binary -----------------------------------------------------------------------
//
// Every binary op is one row of CONVGRAPH_BINARY_OPS (ops/elementwise_table.hpp).

using detail::BinaryKind;
using detail::binary_traits;
using detail::is_comparison;

// A row's gradients, each summed over the axes along which its operand was broadcast.
#define CONVGRAPH_EW_BGRAD_arith(gx, gy) {sum_to(gx, x), sum_to(gy, y)}
#define CONVGRAPH_EW_BGRAD_minmax(gx, gy) {sum_to(gx, x), sum_to(gy, y)}
#define CONVGRAPH_EW_BGRAD_compare(gx, gy) {Var(), Var()}

class BinaryOp final : public Op {
 public:
  explicit BinaryOp(BinaryKind k) : kind_(k) {}
  BinaryKind kind() const { return kind_; }
  std::string name() const override { return binary_traits(kind_).name; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 2) throw ValueError(msg(name(), ": expects 2 inputs, got ", in.size()));
    if (in[0].dtype != in[1].dtype)
      throw TypeError(msg(name(), ": operands have different dtypes ", in[0].to_string(), " and ", in[1].to_string(),
                          " (the DSL inserts casts; direct users must cast)"));
    if (binary_traits(kind_).rule == detail::BinaryRule::arith && in[0].dtype == DType::boolean)
      throw TypeError(msg(name(), ": arithmetic on bool tensors; cast them first"));
    TensorType out = in[0];
    out.shape = detail::broadcast_shapes(in[0].shape, in[1].shape, name());
    if (is_comparison(kind_)) out.dtype = DType::boolean;
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override {
    const Var& x = in[0];
    const Var& y = in[1];
    if (is_comparison(kind_) || !is_float(x.dtype())) return {Var(), Var()};
    switch (kind_) {
#define CONVGRAPH_EW_GRAD(id, rule, formula, gx, gy) \
  case BinaryKind::id: return CONVGRAPH_EW_BGRAD_##rule(gx, gy);
      CONVGRAPH_BINARY_OPS(CONVGRAPH_EW_GRAD)
#undef CONVGRAPH_EW_GRAD
    }
    (void)out;
    return {Var(), Var()};
  }
  std::string_view kernel_key() const override { return "elementwise.binary"; }

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
  std::string_view kernel_key() const override { return "elementwise.where"; }
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
  std::string_view kernel_key() const override { return "elementwise.cast"; }

 private:
  DType to_;
};

}  // namespace

detail::ElementwiseInfo detail::elementwise_info(const Op& op) {
  using C = ElementwiseInfo::Class;
  ElementwiseInfo info;
  if (auto* u = dynamic_cast<const UnaryOp*>(&op)) {
    info = {C::unary, 1, u->kind()};
    info.param[0] = u->param(0);
    info.param[1] = u->param(1);
  }
  else if (auto* b = dynamic_cast<const BinaryOp*>(&op)) info = {C::binary, 2, UnaryKind::neg, b->kind()};
  else if (dynamic_cast<const WhereOp*>(&op)) info = {C::where, 3};
  else if (auto* c = dynamic_cast<const CastOp*>(&op)) info = {C::cast, 1, UnaryKind::neg, BinaryKind::add, c->to()};
  return info;
}

Var detail::unary_op(UnaryKind k, const Var& x, double a, double b) {
  if (!x.defined()) throw ValueError(msg(unary_traits(k).name, ": undefined variable"));
  return apply(std::make_shared<UnaryOp>(k, a, b), {x});
}

Var operator+(const Var& a, const Var& b) { return binary(BinaryKind::add, a, b); }
Var operator-(const Var& a, const Var& b) { return binary(BinaryKind::sub, a, b); }
Var operator*(const Var& a, const Var& b) { return binary(BinaryKind::mul, a, b); }
Var operator/(const Var& a, const Var& b) { return binary(BinaryKind::div, a, b); }
Var operator-(const Var& a) { return neg(a); }
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
Var maximum(const Var& a, const Var& b) { return binary(BinaryKind::maximum, a, b); }
Var minimum(const Var& a, const Var& b) { return binary(BinaryKind::minimum, a, b); }

// One DSL function per unary row, taking the row's parameters after x.
#define CONVGRAPH_EW_SIG_0
#define CONVGRAPH_EW_SIG_1 , double a
#define CONVGRAPH_EW_SIG_2 , double a, double b
#define CONVGRAPH_EW_ARGS_0 0, 0
#define CONVGRAPH_EW_ARGS_1 a, 0
#define CONVGRAPH_EW_ARGS_2 a, b
#define CONVGRAPH_EW_DSL(id, rule, n, ...) \
  Var id(const Var& x CONVGRAPH_EW_SIG_##n) { return detail::unary_op(UnaryKind::id, x, CONVGRAPH_EW_ARGS_##n); }
CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_DSL)
#undef CONVGRAPH_EW_DSL

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
