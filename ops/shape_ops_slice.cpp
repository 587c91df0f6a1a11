// Slicing, flipping, zero padding and concatenation, with the ops their gradients need:
// slice_grad (scatter into zeros: the adjoint of slice) and split_like (the piece of a
// concatenation's gradient that belongs to one input). Kernels are strided copies.
#include <algorithm>
#include <cstring>

#include "convgraph/ops/math.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "core/checked_math.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph {

using detail::check_arity;
using detail::ints_to_string;

namespace {

char* element_ptr(const Tensor& t, std::int64_t offset) {
  return static_cast<char*>(t.raw()) + offset * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

void zero_fill(Tensor& t) {
  if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
}

// "axis=1,2::-1"; a bound is left out only where it means what Python's omitted bound
// means for this step's sign, so equal text still means an equal slice (node merging).
std::string slice_text(int axis, std::int64_t begin, std::int64_t end, std::int64_t step) {
  const std::int64_t open_begin = step > 0 ? kSliceBegin : kSliceEnd;
  const std::int64_t open_end = step > 0 ? kSliceEnd : kSliceBegin;
  auto bound = [](std::int64_t v, std::int64_t open) { return v == open ? std::string() : std::to_string(v); };
  return msg("axis=", axis, ",", bound(begin, open_begin), ":", bound(end, open_end), ":", step);
}

// ---- slice and its adjoint ------------------------------------------------------------

struct SliceParams {
  int axis;
  std::int64_t begin, end, step;

  std::string text() const { return slice_text(axis, begin, end, step); }
  /// Output length along the axis for an input length n (unknown stays unknown).
  std::int64_t length(std::int64_t n) const { return n < 0 ? -1 : detail::normalize_slice(n, begin, end, step).count; }
  void check(const char* op, const TensorType& x) const {
    if (step == 0) throw ValueError(msg(op, ": step must not be 0 (", text(), ")"));
    if (axis < 0 || axis >= x.rank())
      throw ShapeError(msg(op, ": axis ", axis, " is out of range for an input of shape ", shape_to_string(x.shape)));
  }
};

class SliceOp final : public Op {
 public:
  explicit SliceOp(SliceParams p) : p_(p) {}
  std::string name() const override { return "slice"; }
  std::string params() const override { return p_.text(); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    check_arity(*this, in.size(), 1);
    p_.check("slice", in[0]);
    TensorType out = in[0];
    auto& d = out.shape[static_cast<std::size_t>(p_.axis)];
    d = p_.length(d);
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override;
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const Tensor& x = in[0];
    if (out.numel() == 0) return;
    const auto a = static_cast<std::size_t>(p_.axis);
    const auto r = detail::normalize_slice(x.shape()[a], p_.begin, p_.end, p_.step);
    Shape src = contiguous_strides(x.shape());
    const std::int64_t base = r.first * src[a];
    // The step only matters between two taken elements; a huge step takes at most one.
    src[a] = r.count > 1 ? detail::checked_mul(src[a], p_.step, "slice", "the strided step") : 0;
    detail::strided_copy(element_ptr(x, base), src, out.raw(), contiguous_strides(out.shape()), out.shape(),
                         dtype_size(x.dtype()), ctx.pool);
  }

 private:
  SliceParams p_;
};

/// slice_grad(gy, x): zeros shaped like x with gy written where slice(x) read from.
class SliceGradOp final : public Op {
 public:
  explicit SliceGradOp(SliceParams p) : p_(p) {}
  std::string name() const override { return "slice_grad"; }
  std::string params() const override { return p_.text(); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    check_arity(*this, in.size(), 2);
    const TensorType &gy = in[0], &x = in[1];
    p_.check("slice_grad", x);
    Shape want = x.shape;
    want[static_cast<std::size_t>(p_.axis)] = p_.length(want[static_cast<std::size_t>(p_.axis)]);
    bool ok = gy.rank() == x.rank();
    for (std::size_t i = 0; ok && i < want.size(); ++i) ok = detail::dims_compatible(gy.shape[i], want[i]);
    if (!ok)
      throw ShapeError(msg("slice_grad: output gradient of shape ", shape_to_string(gy.shape), " does not match ",
                           shape_to_string(want), ", the slice [", p_.text(), "] of ", shape_to_string(x.shape)));
    return TensorType{gy.dtype, x.shape, x.device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    return {convgraph::apply(std::make_shared<SliceOp>(p_), {g}), Var()};
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const Tensor& gy = in[0];
    zero_fill(out);
    if (gy.numel() == 0) return;
    const auto a = static_cast<std::size_t>(p_.axis);
    const auto r = detail::normalize_slice(out.shape()[a], p_.begin, p_.end, p_.step);
    Shape dst = contiguous_strides(out.shape());
    const std::int64_t base = r.first * dst[a];
    dst[a] = r.count > 1 ? detail::checked_mul(dst[a], p_.step, "slice_grad", "the strided step") : 0;
    detail::strided_copy(gy.raw(), contiguous_strides(gy.shape()), element_ptr(out, base), dst, gy.shape(),
                         dtype_size(gy.dtype()), ctx.pool);
  }

 private:
  SliceParams p_;
};

std::vector<Var> SliceOp::grad(const std::vector<Var>& in, const Var&, const Var& gy) const {
  return {convgraph::apply(std::make_shared<SliceGradOp>(p_), {gy, in[0]})};
}

// ---- flip ---------------------------------------------------------------------------

class FlipOp final : public Op {
 public:
  explicit FlipOp(std::vector<int> axes) : axes_(std::move(axes)) {}
  std::string name() const override { return "flip"; }
  std::string params() const override { return ints_to_string(axes_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    check_arity(*this, in.size(), 1);
    for (int a : axes_)
      if (a < 0 || a >= in[0].rank())
        throw ShapeError(
            msg("flip: axis ", a, " is out of range for an input of shape ", shape_to_string(in[0].shape)));
    return in[0];
  }
  std::vector<Var> grad(const std::vector<Var>&, const Var&, const Var& gy) const override { return {flip(gy, axes_)}; }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const Tensor& x = in[0];
    if (x.numel() == 0) return;
    Shape src = contiguous_strides(x.shape());
    std::int64_t base = 0;
    for (int a : axes_) {
      const auto ua = static_cast<std::size_t>(a);
      base += (x.shape()[ua] - 1) * src[ua];
      src[ua] = -src[ua];
    }
    detail::strided_copy(element_ptr(x, base), src, out.raw(), contiguous_strides(out.shape()), out.shape(),
                         dtype_size(x.dtype()), ctx.pool);
  }

 private:
  std::vector<int> axes_;
};

// ---- pad ----------------------------------------------------------------------------

using Pads = std::vector<std::pair<std::int64_t, std::int64_t>>;

std::string pads_text(const Pads& pads) {
  std::string s = "(";
  for (std::size_t i = 0; i < pads.size(); ++i) s += msg(i ? ", " : "", "(", pads[i].first, ", ", pads[i].second, ")");
  return s + ")";
}

class PadOp final : public Op {
 public:
  explicit PadOp(Pads pads) : pads_(std::move(pads)) {}
  std::string name() const override { return "pad"; }
  std::string params() const override { return pads_text(pads_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    check_arity(*this, in.size(), 1);
    TensorType out = in[0];
    if (pads_.size() > out.shape.size())
      throw ShapeError(msg("pad: ", pads_.size(), " (pre, post) pairs ", pads_text(pads_), " for an input of shape ",
                           shape_to_string(out.shape)));
    const std::size_t first = out.shape.size() - pads_.size();
    for (std::size_t i = 0; i < pads_.size(); ++i) {
      const auto [pre, post] = pads_[i];
      if (pre < 0 || post < 0)
        throw ValueError(msg("pad: padding ", pads_text(pads_), " has a negative amount (", pre, ", ", post,
                             ") for axis ", first + i, "; use slice to crop"));
      auto& d = out.shape[first + i];
      if (d >= 0 && (__builtin_add_overflow(d, pre, &d) || __builtin_add_overflow(d, post, &d)))
        throw ShapeError(msg("pad: padding ", pads_text(pads_), " overflows int64"));
    }
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override {
    Var g = gy;
    const int first = in[0].rank() - static_cast<int>(pads_.size());
    for (std::size_t i = 0; i < pads_.size(); ++i) {
      const auto [pre, post] = pads_[i];
      if (pre == 0 && post == 0) continue;
      g = slice(g, first + static_cast<int>(i), pre, post > 0 ? -post : kSliceEnd);
    }
    return {g};
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const Tensor& x = in[0];
    zero_fill(out);
    const Shape dst = contiguous_strides(out.shape());
    const std::size_t first = dst.size() - pads_.size();
    std::int64_t base = 0;
    for (std::size_t i = 0; i < pads_.size(); ++i) base += pads_[i].first * dst[first + i];
    detail::strided_copy(x.raw(), contiguous_strides(x.shape()), element_ptr(out, base), dst, x.shape(),
                         dtype_size(x.dtype()), ctx.pool);
  }

 private:
  Pads pads_;
};

// ---- concatenate and its gradient pieces ----------------------------------------------

class ConcatenateOp final : public Op {
 public:
  explicit ConcatenateOp(int axis) : axis_(axis) {}
  std::string name() const override { return "concatenate"; }
  std::string params() const override { return msg("axis=", axis_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.empty()) throw ValueError("concatenate: needs at least one input");
    TensorType out = in[0];
    if (axis_ < 0 || axis_ >= out.rank())
      throw ShapeError(
          msg("concatenate: axis ", axis_, " is out of range for input 0 of shape ", shape_to_string(out.shape)));
    const auto a = static_cast<std::size_t>(axis_);
    for (std::size_t k = 1; k < in.size(); ++k) {
      const TensorType& t = in[k];
      if (t.dtype != out.dtype)
        throw TypeError(msg("concatenate: input ", k, " has dtype ", dtype_name(t.dtype), " but input 0 has ",
                            dtype_name(out.dtype), "; cast first"));
      bool ok = t.rank() == out.rank();
      for (std::size_t i = 0; ok && i < t.shape.size(); ++i)
        ok = i == a || detail::dims_compatible(t.shape[i], out.shape[i]);
      if (!ok)
        throw ShapeError(msg("concatenate: input ", k, " of shape ", shape_to_string(t.shape),
                             " does not match input 0 of shape ", shape_to_string(in[0].shape), " outside axis ",
                             axis_));
      for (std::size_t i = 0; i < t.shape.size(); ++i) {
        if (i == a)
          out.shape[i] = out.shape[i] < 0 || t.shape[i] < 0
                             ? -1
                             : detail::checked_add(out.shape[i], t.shape[i], "concatenate",
                                                   "the length of the concatenation axis");
        else if (out.shape[i] < 0)
          out.shape[i] = t.shape[i];
      }
    }
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override;
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const Shape dst = contiguous_strides(out.shape());
    const auto a = static_cast<std::size_t>(axis_);
    std::int64_t offset = 0;
    for (const Tensor& x : in) {
      detail::strided_copy(x.raw(), contiguous_strides(x.shape()), element_ptr(out, offset * dst[a]), dst, x.shape(),
                           dtype_size(x.dtype()), ctx.pool);
      offset += x.shape()[a];
    }
  }

 private:
  int axis_;
};

/// split_like(g, x_0, ..., x_n-1): the part of g (a gradient of concatenate(x_*, axis))
/// that lines up with x_index; the x_* only supply their run-time lengths.
class SplitLikeOp final : public Op {
 public:
  SplitLikeOp(int axis, int index) : axis_(axis), index_(index) {}
  std::string name() const override { return "split_like"; }
  std::string params() const override { return msg("axis=", axis_, ",index=", index_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() < 2 || index_ < 0 || index_ + 1 >= static_cast<int>(in.size()))
      throw ValueError(msg("split_like: piece ", index_, " of ", in.size() - 1, " inputs does not exist"));
    const TensorType& g = in[0];
    if (axis_ < 0 || axis_ >= g.rank())
      throw ShapeError(
          msg("split_like: axis ", axis_, " is out of range for a gradient of shape ", shape_to_string(g.shape)));
    const auto a = static_cast<std::size_t>(axis_);
    std::int64_t total = 0;
    for (std::size_t k = 1; k < in.size(); ++k) {
      if (in[k].rank() != g.rank())
        throw ShapeError(msg("split_like: input ", k - 1, " of shape ", shape_to_string(in[k].shape),
                             " has a different rank from the gradient ", shape_to_string(g.shape)));
      const std::int64_t d = in[k].shape[a];
      total = total < 0 || d < 0 ? -1 : detail::checked_add(total, d, "split_like", "the pieces' total length");
    }
    if (total >= 0 && g.shape[a] >= 0 && total != g.shape[a])
      throw ShapeError(msg("split_like: the pieces' lengths along axis ", axis_, " sum to ", total,
                           " but the gradient has ", g.shape[a]));
    TensorType out = g;
    out.shape[a] = in[static_cast<std::size_t>(index_ + 1)].shape[a];
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gg) const override {
    std::vector<Var> pieces;
    for (std::size_t k = 1; k < in.size(); ++k)
      pieces.push_back(static_cast<int>(k) == index_ + 1 ? gg : zeros_like(in[k]));
    std::vector<Var> out(in.size());
    out[0] = concatenate(pieces, axis_);
    return out;
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const Tensor& g = in[0];
    const auto a = static_cast<std::size_t>(axis_);
    std::int64_t offset = 0;
    for (int k = 0; k < index_; ++k) offset += in[static_cast<std::size_t>(k + 1)].shape()[a];
    const Shape src = contiguous_strides(g.shape());
    detail::strided_copy(element_ptr(g, offset * src[a]), src, out.raw(), contiguous_strides(out.shape()), out.shape(),
                         dtype_size(g.dtype()), ctx.pool);
  }

 private:
  int axis_, index_;
};

std::vector<Var> ConcatenateOp::grad(const std::vector<Var>& in, const Var&, const Var& gy) const {
  std::vector<Var> split_inputs{gy};
  split_inputs.insert(split_inputs.end(), in.begin(), in.end());
  std::vector<Var> out;
  for (std::size_t k = 0; k < in.size(); ++k)
    out.push_back(convgraph::apply(std::make_shared<SplitLikeOp>(axis_, static_cast<int>(k)), split_inputs));
  return out;
}

}  // namespace

Var slice(const Var& x, int axis, std::int64_t begin, std::int64_t end, std::int64_t step) {
  if (x.rank() == 0) throw ShapeError("slice: cannot slice a 0-d input");
  const int a = detail::normalize_axis("slice", "axis", axis, x.rank());
  return convgraph::apply(std::make_shared<SliceOp>(SliceParams{a, begin, end, step}), {x});
}

Var flip(const Var& x, std::vector<int> axes) {
  std::vector<int> norm;
  for (int a : axes) {
    const int n = detail::normalize_axis("flip", "axis", a, x.rank());
    for (int m : norm)
      if (m == n) throw ValueError(msg("flip: axes ", ints_to_string(axes), " name axis ", a, " twice"));
    norm.push_back(n);
  }
  std::sort(norm.begin(), norm.end());
  return convgraph::apply(std::make_shared<FlipOp>(std::move(norm)), {x});
}

Var pad(const Var& x, std::vector<std::pair<std::int64_t, std::int64_t>> pads) {
  return convgraph::apply(std::make_shared<PadOp>(std::move(pads)), {x});
}

Var concatenate(const std::vector<Var>& xs, int axis) {
  if (xs.empty()) throw ValueError("concatenate: needs at least one input");
  for (std::size_t k = 0; k < xs.size(); ++k)
    if (!xs[k].defined()) throw ValueError(msg("concatenate: input ", k, " is an undefined variable"));
  if (xs[0].rank() == 0) throw ShapeError("concatenate: cannot concatenate 0-d inputs");
  const int a = detail::normalize_axis("concatenate", "axis", axis, xs[0].rank());
  return convgraph::apply(std::make_shared<ConcatenateOp>(a), xs);
}

}  // namespace convgraph
