// Reshape, flatten and dimshuffle/transpose: ops that keep the elements and change how the
// axes are laid out. Every op copies (graph values never alias), so the kernels are a
// memcpy or one strided copy.
#include "convgraph/ops/shape_ops.hpp"

#include <cstring>
#include <sstream>

#include "core/checked_math.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph {

using detail::check_arity;
using detail::ints_to_string;

namespace {

void copy_bytes(const std::vector<Tensor>& inputs, Tensor& output) {
  if (output.nbytes() != inputs[0].nbytes())
    throw ShapeError(msg("reshape kernel: output has ", output.numel(), " elements, input ", inputs[0].numel()));
  if (output.nbytes()) std::memcpy(output.raw(), inputs[0].raw(), output.nbytes());
}

// ---- reshape ------------------------------------------------------------------------

class ReshapeOp final : public Op {
 public:
  explicit ReshapeOp(Shape shape) : shape_(std::move(shape)) {}
  std::string name() const override { return "reshape"; }
  std::string params() const override { return ints_to_string(shape_); }

  TensorType infer(const std::vector<TensorType>& in) const override {
    check_arity(*this, in.size(), 1);
    const TensorType& x = in[0];
    int infer_at = -1;
    std::int64_t known = 1;
    for (std::size_t i = 0; i < shape_.size(); ++i) {
      if (shape_[i] < -1)
        throw ValueError(msg("reshape: dimension ", shape_[i], " of target shape ", ints_to_string(shape_),
                             " is invalid (use -1 for the one inferred dimension)"));
      if (shape_[i] == -1) {
        if (infer_at >= 0)
          throw ValueError(msg("reshape: target shape ", ints_to_string(shape_), " has more than one -1"));
        infer_at = static_cast<int>(i);
      } else if (__builtin_mul_overflow(known, shape_[i], &known)) {
        throw ShapeError(msg("reshape: target shape ", ints_to_string(shape_), " overflows int64"));
      }
    }
    TensorType out{x.dtype, shape_, x.device};
    if (!x.fully_known()) return out;  // the inferred dimension, if any, stays unknown
    const std::int64_t n = numel(x.shape);
    if (infer_at >= 0) {
      if (known == 0 || n % known != 0)
        throw ShapeError(msg("reshape: cannot reshape input of shape ", shape_to_string(x.shape), " (", n,
                             " elements) to ", ints_to_string(shape_)));
      out.shape[static_cast<std::size_t>(infer_at)] = n / known;
    } else if (known != n) {
      throw ShapeError(msg("reshape: cannot reshape input of shape ", shape_to_string(x.shape), " (", n,
                           " elements) to ", ints_to_string(shape_), " (", known, " elements)"));
    }
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override {
    return {reshape_like(gy, in[0])};
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext&) const override { copy_bytes(in, out); }

 private:
  Shape shape_;
};

/// reshape_like(x, like): x's elements in like's (run-time) shape. The gradient of every
/// reshape-style op, since the input's shape may be known only when the function runs.
class ReshapeLikeOp final : public Op {
 public:
  std::string name() const override { return "reshape_like"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    check_arity(*this, in.size(), 2);
    if (in[0].fully_known() && in[1].fully_known() && numel(in[0].shape) != numel(in[1].shape))
      throw ShapeError(msg("reshape_like: x of shape ", shape_to_string(in[0].shape), " (", numel(in[0].shape),
                           " elements) cannot take the shape ", shape_to_string(in[1].shape), " (", numel(in[1].shape),
                           " elements)"));
    return TensorType{in[0].dtype, in[1].shape, in[0].device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override {
    return {reshape_like(gy, in[0]), Var()};
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext&) const override { copy_bytes(in, out); }
};

// ---- flatten ------------------------------------------------------------------------

class FlattenOp final : public Op {
 public:
  explicit FlattenOp(int ndim) : ndim_(ndim) {}
  std::string name() const override { return "flatten"; }
  std::string params() const override { return msg("ndim=", ndim_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    check_arity(*this, in.size(), 1);
    const TensorType& x = in[0];
    if (ndim_ < 1 || (ndim_ > 1 && ndim_ > x.rank()))
      throw ValueError(msg("flatten: ndim ", ndim_, " is invalid for an input of shape ", shape_to_string(x.shape),
                           " (valid: 1..", std::max(1, x.rank()), ")"));
    Shape s(x.shape.begin(), x.shape.begin() + (ndim_ - 1));
    std::int64_t last = 1;
    for (int a = ndim_ - 1; a < x.rank(); ++a) {
      const std::int64_t d = x.shape[static_cast<std::size_t>(a)];
      if (d < 0 || last < 0)
        last = -1;
      else
        last = detail::checked_mul(last, d, "flatten", "the flattened length");
    }
    s.push_back(last);
    return TensorType{x.dtype, std::move(s), x.device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override {
    return {reshape_like(gy, in[0])};
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext&) const override { copy_bytes(in, out); }

 private:
  int ndim_;
};

// ---- dimshuffle / transpose ---------------------------------------------------------

std::string pattern_text(const std::vector<int>& p) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < p.size(); ++i) {
    os << (i ? ", " : "");
    if (p[i] < 0)
      os << 'x';
    else
      os << p[i];
  }
  os << ')';
  return os.str();
}

class DimshuffleOp final : public Op {
 public:
  explicit DimshuffleOp(std::vector<int> pattern) : pattern_(std::move(pattern)) {}
  std::string name() const override { return "dimshuffle"; }
  std::string params() const override { return pattern_text(pattern_); }

  TensorType infer(const std::vector<TensorType>& in) const override {
    check_arity(*this, in.size(), 1);
    const TensorType& x = in[0];
    std::vector<bool> kept(static_cast<std::size_t>(x.rank()), false);
    Shape s;
    for (int p : pattern_) {
      if (p == -1) {
        s.push_back(1);
        continue;
      }
      if (p < -1 || p >= x.rank())
        throw ShapeError(msg("dimshuffle: pattern ", pattern_text(pattern_), " names axis ", p,
                             ", out of range for an input of shape ", shape_to_string(x.shape),
                             " (use -1 for a new axis)"));
      if (kept[static_cast<std::size_t>(p)])
        throw ValueError(msg("dimshuffle: pattern ", pattern_text(pattern_), " repeats axis ", p));
      kept[static_cast<std::size_t>(p)] = true;
      s.push_back(x.shape[static_cast<std::size_t>(p)]);
    }
    // Only length-1 axes may be dropped; an unknown one is checked when the function runs.
    for (int a = 0; a < x.rank(); ++a) {
      const std::int64_t d = x.shape[static_cast<std::size_t>(a)];
      if (!kept[static_cast<std::size_t>(a)] && d != 1 && d >= 0)
        throw ShapeError(msg("dimshuffle: pattern ", pattern_text(pattern_), " drops axis ", a, " of length ", d,
                             " (input shape ", shape_to_string(x.shape), "); only length-1 axes can be dropped"));
    }
    return TensorType{x.dtype, std::move(s), x.device};
  }

  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override {
    // Inverse pattern: each input axis comes from its output position, or is a dropped
    // length-1 axis re-created with 'x'; the output's 'x' axes (length 1) are dropped.
    std::vector<int> inv(static_cast<std::size_t>(in[0].rank()), -1);
    for (std::size_t j = 0; j < pattern_.size(); ++j)
      if (pattern_[j] >= 0) inv[static_cast<std::size_t>(pattern_[j])] = static_cast<int>(j);
    return {dimshuffle(gy, std::move(inv))};
  }

  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const Tensor& x = in[0];
    const Shape xs = contiguous_strides(x.shape());
    Shape src_strides(pattern_.size(), 0);
    for (std::size_t j = 0; j < pattern_.size(); ++j)
      if (pattern_[j] >= 0) src_strides[j] = xs[static_cast<std::size_t>(pattern_[j])];
    for (int a = 0; a < x.rank(); ++a) {
      bool kept = false;
      for (int p : pattern_) kept = kept || p == a;
      if (!kept && x.shape()[static_cast<std::size_t>(a)] != 1)
        throw ShapeError(msg("dimshuffle: pattern ", pattern_text(pattern_), " drops axis ", a, " of length ",
                             x.shape()[static_cast<std::size_t>(a)], " at run time"));
    }
    detail::strided_copy(x.raw(), src_strides, out.raw(), contiguous_strides(out.shape()), out.shape(),
                         dtype_size(x.dtype()), ctx.pool);
  }

 private:
  std::vector<int> pattern_;
};

}  // namespace

Var reshape(const Var& x, Shape shape) { return convgraph::apply(std::make_shared<ReshapeOp>(std::move(shape)), {x}); }

Var reshape_like(const Var& x, const Var& like) {
  return convgraph::apply(std::make_shared<ReshapeLikeOp>(), {x, like});
}

Var flatten(const Var& x, int ndim) { return convgraph::apply(std::make_shared<FlattenOp>(ndim), {x}); }

Var dimshuffle(const Var& x, std::vector<int> pattern) {
  return convgraph::apply(std::make_shared<DimshuffleOp>(std::move(pattern)), {x});
}

Var transpose(const Var& x, std::vector<int> axes) {
  const int r = x.rank();
  if (axes.empty())
    for (int a = r - 1; a >= 0; --a) axes.push_back(a);
  if (static_cast<int>(axes.size()) != r)
    throw ShapeError(msg("transpose: axes ", ints_to_string(axes), " has ", axes.size(), " entries for a rank-", r,
                         " input of shape ", shape_to_string(x.shape())));
  const std::vector<int> given = axes;
  std::vector<bool> seen(static_cast<std::size_t>(r), false);
  for (int& a : axes) {
    const int n = detail::normalize_axis("transpose", "axis", a, r);
    if (seen[static_cast<std::size_t>(n)])
      throw ValueError(msg("transpose: axes ", ints_to_string(given), " is not a permutation (axis ", a, " repeats)"));
    seen[static_cast<std::size_t>(n)] = true;
    a = n;
  }
  return dimshuffle(x, std::move(axes));
}

}  // namespace convgraph
