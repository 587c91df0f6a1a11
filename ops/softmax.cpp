// softmax / log_softmax over the last axis with fused, numerically stable gradient ops,
// and categorical cross-entropy (dense targets, or integer class indices through a
// take/scatter pair of ops that are each other's gradient).
#include <cmath>

#include "backends/cuda/op_kernels.hpp"
#include "convgraph/ops/math.hpp"
#include "convgraph/ops/nnet.hpp"
#include "ops/kernel_util.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph {

namespace {

constexpr std::int64_t kRowGrain = 1 << 14;  // elements per parallel task

/// Calls f(T{}) for float32/float64 tensors; the ops' infer() has already rejected others.
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  if (t == DType::float32)
    f(float{});
  else if (t == DType::float64)
    f(double{});
  else
    throw TypeError(msg(op, ": no kernel for dtype ", dtype_name(t)));
}

/// Runs fn(row_begin, row_end) over the rows (all axes but the last) of `t`.
template <class F>
void for_rows(const Tensor& t, const ExecContext& ctx, F&& fn) {
  const std::int64_t n = t.rank() ? t.shape().back() : 1;
  if (n == 0) return;
  const std::int64_t rows = t.numel() / n;
  detail::parallel_range(ctx, rows, std::max<std::int64_t>(1, kRowGrain / n), fn);
}

void check_float_rows(const std::string& op, const char* arg, const TensorType& t) {
  detail::check_dtype(op, arg, t.dtype, {DType::float32, DType::float64});
  if (t.rank() == 0)
    throw ShapeError(msg(op, ": ", arg, " must have rank >= 1 (classes on the last axis), got a 0-d input"));
}

// ---- softmax / log_softmax ----------------------------------------------------------

class SoftmaxOp final : public Op {
 public:
  explicit SoftmaxOp(bool log) : log_(log) {}
  std::string name() const override { return log_ ? "log_softmax" : "softmax"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 1);
    check_float_rows(name(), "x", in[0]);
    return in[0];
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override;
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>&) const override { return d == DeviceKind::cuda; }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::softmax(log_, in[0], out, ctx.stream);
    dispatch_float(in[0].dtype(), "softmax", [&](auto z) {
      using T = decltype(z);
      const T* x = in[0].data<T>();
      T* y = out.data<T>();
      const std::int64_t n = in[0].shape().back();
      for_rows(in[0], ctx, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          const T* xr = x + r * n;
          T* yr = y + r * n;
          // Subtracting the row maximum keeps exp() from overflowing.
          T m = xr[0];
          for (std::int64_t j = 1; j < n; ++j) m = xr[j] > m ? xr[j] : m;
          double s = 0;
          for (std::int64_t j = 0; j < n; ++j) {
            const T e = std::exp(xr[j] - m);
            s += e;
            if (!log_) yr[j] = e;
          }
          if (log_) {
            // (x - m) - log(s), not x - (m + log(s)): m + log(s) would round away log(s).
            const T ls = static_cast<T>(std::log(s));
            for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) - ls;
          } else {
            const T inv = static_cast<T>(1.0 / s);
            for (std::int64_t j = 0; j < n; ++j) yr[j] *= inv;
          }
        }
      });
    });
  }

 private:
  bool log_;
};

/// softmax_grad(gy, y) = y * (gy - sum(gy * y)), and
/// log_softmax_grad(gy, y) = gy - exp(y) * sum(gy), sums over the last axis: the whole
/// backward pass of the row in one kernel, from the forward output alone.
class SoftmaxGradOp final : public Op {
 public:
  explicit SoftmaxGradOp(bool log) : log_(log) {}
  std::string name() const override { return log_ ? "log_softmax_grad" : "softmax_grad"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    check_float_rows(name(), "gy", in[0]);
    bool ok = in[0].dtype == in[1].dtype && in[0].rank() == in[1].rank();
    for (std::size_t i = 0; ok && i < in[0].shape.size(); ++i)
      ok = detail::dims_compatible(in[0].shape[i], in[1].shape[i]);
    if (!ok)
      throw ShapeError(
          msg(name(), ": output gradient ", in[0].to_string(), " does not match the output ", in[1].to_string()));
    TensorType out = in[1];
    for (std::size_t i = 0; i < out.shape.size(); ++i)
      if (out.shape[i] < 0) out.shape[i] = in[0].shape[i];
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& gg) const override {
    const Var &gy = in[0], &y = in[1];
    if (!log_) {
      const Var s = sum(gy * y, {-1}, true);
      return {apply(std::make_shared<SoftmaxGradOp>(false), {gg, y}), gg * (gy - s) - sum(gg * y, {-1}, true) * gy};
    }
    const Var e = exp(y);
    return {gg - sum(gg * e, {-1}, true), -(gg * e * sum(gy, {-1}, true))};
  }
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>&) const override { return d == DeviceKind::cuda; }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::softmax_grad(log_, in[0], in[1], out, ctx.stream);
    dispatch_float(in[0].dtype(), name().c_str(), [&](auto z) {
      using T = decltype(z);
      const T* gy = in[0].data<T>();
      const T* y = in[1].data<T>();
      T* gx = out.data<T>();
      const std::int64_t n = in[0].shape().back();
      for_rows(in[0], ctx, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          const T *g = gy + r * n, *yr = y + r * n;
          T* o = gx + r * n;
          double s = 0;
          if (log_) {
            for (std::int64_t j = 0; j < n; ++j) s += g[j];
            for (std::int64_t j = 0; j < n; ++j) o[j] = g[j] - std::exp(yr[j]) * static_cast<T>(s);
          } else {
            for (std::int64_t j = 0; j < n; ++j) s += static_cast<double>(g[j]) * yr[j];
            for (std::int64_t j = 0; j < n; ++j) o[j] = yr[j] * (g[j] - static_cast<T>(s));
          }
        }
      });
    });
  }

 private:
  bool log_;
};

std::vector<Var> SoftmaxOp::grad(const std::vector<Var>&, const Var& out, const Var& g) const {
  return {apply(std::make_shared<SoftmaxGradOp>(log_), {g, out})};
}

// ---- class-index gather/scatter for cross-entropy -----------------------------------

void check_indices(const std::string& op, const TensorType& p, const TensorType& idx) {
  detail::check_dtype(op, "class indices", idx.dtype, {DType::int32, DType::int64});
  bool ok = idx.rank() + 1 == p.rank();
  for (std::size_t i = 0; ok && i < idx.shape.size(); ++i) ok = detail::dims_compatible(idx.shape[i], p.shape[i]);
  if (!ok)
    throw ShapeError(msg(op, ": class indices of shape ", shape_to_string(idx.shape), " must have the shape ",
                         shape_to_string(Shape(p.shape.begin(), p.shape.end() - (p.rank() ? 1 : 0))),
                         " of the probabilities ", shape_to_string(p.shape), " without their last axis"));
}

/// Reads the class index of row r, checking its range.
template <class I>
std::int64_t class_of(const I* idx, std::int64_t r, std::int64_t n, const char* op) {
  const auto c = static_cast<std::int64_t>(idx[r]);
  if (c < 0 || c >= n)
    throw ValueError(msg(op, ": class index ", c, " at position ", r, " is out of range for ", n, " classes"));
  return c;
}

template <class F>
void dispatch_index(DType t, F&& f) {
  if (t == DType::int32)
    f(std::int32_t{});
  else
    f(std::int64_t{});
}

/// take_class(p, idx)[r] = p[r, idx[r]]: picks one entry of the last axis per row.
class TakeClassOp final : public Op {
 public:
  std::string name() const override { return "take_class"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    check_float_rows(name(), "probabilities", in[0]);
    check_indices(name(), in[0], in[1]);
    return TensorType{in[0].dtype, Shape(in[0].shape.begin(), in[0].shape.end() - 1), in[0].device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override;
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>&) const override { return d == DeviceKind::cuda; }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::take_class(in[0], in[1], out, ctx.stream);
    const std::int64_t n = in[0].shape().back(), rows = out.numel();
    dispatch_float(in[0].dtype(), "take_class", [&](auto z) {
      using T = decltype(z);
      dispatch_index(in[1].dtype(), [&](auto iz) {
        using I = decltype(iz);
        const T* p = in[0].data<T>();
        const I* idx = in[1].data<I>();
        T* o = out.data<T>();
        for (std::int64_t r = 0; r < rows; ++r) o[r] = p[r * n + class_of(idx, r, n, "take_class")];
      });
    });
  }
};

/// scatter_class(g, idx, like): zeros shaped like `like` with g[r] at [r, idx[r]].
class ScatterClassOp final : public Op {
 public:
  std::string name() const override { return "scatter_class"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 3);
    check_float_rows(name(), "like", in[2]);
    check_indices(name(), in[2], in[1]);
    if (in[0].dtype != in[2].dtype || in[0].rank() != in[1].rank())
      throw ShapeError(msg(name(), ": values ", in[0].to_string(), " do not match class indices ", in[1].to_string(),
                           " and target ", in[2].to_string()));
    return in[2];
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gg) const override {
    return {apply(std::make_shared<TakeClassOp>(), {gg, in[1]}), Var(), Var()};
  }
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>&) const override { return d == DeviceKind::cuda; }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::scatter_class(in[0], in[1], out, ctx.stream);
    const std::int64_t n = out.shape().back(), rows = in[0].numel();
    dispatch_float(out.dtype(), "scatter_class", [&](auto z) {
      using T = decltype(z);
      dispatch_index(in[1].dtype(), [&](auto iz) {
        using I = decltype(iz);
        const T* g = in[0].data<T>();
        const I* idx = in[1].data<I>();
        T* o = out.data<T>();
        std::fill(o, o + out.numel(), T(0));
        for (std::int64_t r = 0; r < rows; ++r) o[r * n + class_of(idx, r, n, "scatter_class")] = g[r];
      });
    });
  }
};

std::vector<Var> TakeClassOp::grad(const std::vector<Var>& in, const Var&, const Var& g) const {
  return {apply(std::make_shared<ScatterClassOp>(), {g, in[1], in[0]}), Var()};
}

}  // namespace

Var softmax(const Var& x) { return apply(std::make_shared<SoftmaxOp>(false), {x}); }
Var log_softmax(const Var& x) { return apply(std::make_shared<SoftmaxOp>(true), {x}); }

Var categorical_crossentropy(const Var& probs, const Var& targets) {
  const char* op = "categorical_crossentropy";
  check_float_rows(op, "probs", probs.type());
  if (is_integer(targets.dtype())) {
    check_indices(op, probs.type(), targets.type());
    return -log(apply(std::make_shared<TakeClassOp>(), {probs, targets}));
  }
  if (targets.dtype() != probs.dtype())
    throw TypeError(msg(op, ": targets ", targets.type().to_string(), " must be class indices (int32/int64) or ",
                        "probabilities of the same dtype as probs ", probs.type().to_string()));
  bool ok = targets.rank() == probs.rank();
  for (int i = 0; ok && i < probs.rank(); ++i)
    ok = detail::dims_compatible(targets.shape()[static_cast<std::size_t>(i)],
                                 probs.shape()[static_cast<std::size_t>(i)]);
  if (!ok)
    throw ShapeError(msg(op, ": targets of shape ", shape_to_string(targets.shape()), " must have the shape ",
                         shape_to_string(probs.shape()), " of probs (or be class indices of shape probs[:-1])"));
  return -sum(targets * log(probs), {-1});
}

}  // namespace convgraph
