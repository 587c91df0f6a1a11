// Reductions (sum, mean, max, min over axes) and the broadcasting helpers autodiff
// needs: sum_to (undo a broadcast), broadcast_to (undo a reduction), fills.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cuda/op_kernels.hpp"
#include "convgraph/ops/math.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph {

using detail::dispatch_dtype;

namespace {

enum class ReduceKind { sum, mean, max, min };
const char* reduce_name(ReduceKind k) {
  constexpr const char* n[] = {"sum", "mean", "max", "min"};
  return n[static_cast<int>(k)];
}

// The CUDA kernels' own enum, mapped by name rather than cast by declaration order.
gpu::Reduce cuda_reduce(ReduceKind k) {
  switch (k) {
    case ReduceKind::sum: return gpu::Reduce::sum;
    case ReduceKind::mean: return gpu::Reduce::mean;
    case ReduceKind::max: return gpu::Reduce::max;
    case ReduceKind::min: return gpu::Reduce::min;
  }
  throw ValueError("reduce: unknown kind");
}

std::string axes_text(const std::vector<int>& axes) {
  std::string s = "axes=(";
  for (std::size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + std::to_string(axes[i]);
  return s + ")";
}

// Splits a shape around a set of reduced axes into (outer, reduced, inner) loops by
// viewing the tensor as [kept..., reduced...] through index arithmetic.
struct ReducePlan {
  Shape shape;
  std::vector<bool> reduced;
  std::int64_t out_count = 1, red_count = 1;
};

ReducePlan make_plan(const Shape& shape, const std::vector<int>& axes) {
  ReducePlan p{shape, std::vector<bool>(shape.size(), false)};
  for (int a : axes) p.reduced[static_cast<std::size_t>(a)] = true;
  for (std::size_t i = 0; i < shape.size(); ++i) (p.reduced[i] ? p.red_count : p.out_count) *= shape[i];
  return p;
}

class ReduceOp final : public Op {
 public:
  ReduceOp(ReduceKind k, std::vector<int> axes, bool keepdims) : kind_(k), axes_(std::move(axes)), keepdims_(keepdims) {}
  std::string name() const override { return reduce_name(kind_); }
  std::string params() const override { return axes_text(axes_) + (keepdims_ ? " keepdims" : ""); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 1) throw ValueError(msg(name(), ": expects 1 input, got ", in.size()));
    const TensorType& x = in[0];
    for (int a : axes_)
      if (a >= x.rank()) throw ValueError(msg(name(), ": axis ", a, " is out of range for input ", x.to_string()));
    if (x.dtype == DType::boolean && kind_ != ReduceKind::max && kind_ != ReduceKind::min)
      throw TypeError(msg(name(), ": cannot reduce a bool tensor; cast it first"));
    if (kind_ == ReduceKind::mean && !is_float(x.dtype))
      throw TypeError(msg("mean: input must be a float tensor, got ", x.to_string()));
    TensorType out = x;
    out.shape.clear();
    for (int i = 0; i < x.rank(); ++i) {
      const bool red = std::find(axes_.begin(), axes_.end(), i) != axes_.end();
      if (!red) out.shape.push_back(x.shape[static_cast<std::size_t>(i)]);
      else if (keepdims_) out.shape.push_back(1);
    }
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override;
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>& in) const override {
    return d == DeviceKind::cuda && gpu::elementwise_dtype_supported(in[0].dtype);
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda)
      return gpu::reduce(cuda_reduce(kind_), in[0], axes_, out, ctx.stream);
    const ReducePlan p = make_plan(in[0].shape(), axes_);
    dispatch_dtype(in[0].dtype(), name().c_str(), [&](auto z) {
      using T = decltype(z);
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
      const T* x = in[0].data<T>();
      T* y = static_cast<T*>(out.raw());
      if ((kind_ == ReduceKind::max || kind_ == ReduceKind::min) && p.red_count == 0)
        throw ValueError(msg(name(), ": zero-size reduction of ", shape_to_string(in[0].shape()), " has no identity"));
      const Shape& s = p.shape;
      const std::size_t r = s.size();
      // Strides of the kept and reduced sub-shapes, so each output element walks its inputs.
      Shape kept, red;
      std::vector<std::int64_t> kst, rst;
      const Shape st = contiguous_strides(s);
      for (std::size_t i = 0; i < r; ++i) {
        (p.reduced[i] ? red : kept).push_back(s[i]);
        (p.reduced[i] ? rst : kst).push_back(st[i]);
      }
      auto base_of = [](std::int64_t idx, const Shape& sh, const std::vector<std::int64_t>& stv) {
        std::int64_t off = 0;
        for (std::size_t a = sh.size(); a-- > 0;) {
          off += (idx % sh[a]) * stv[a];
          idx /= sh[a];
        }
        return off;
      };
      std::vector<std::int64_t> red_off(static_cast<std::size_t>(p.red_count));
      for (std::int64_t j = 0; j < p.red_count; ++j) red_off[static_cast<std::size_t>(j)] = base_of(j, red, rst);
      detail::parallel_range(ctx, p.out_count, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, p.red_count)),
                             [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t o = b; o < e; ++o) {
          const T* base = x + base_of(o, kept, kst);
          if (kind_ == ReduceKind::sum || kind_ == ReduceKind::mean) {
            Acc acc{};
            for (auto off : red_off) acc += static_cast<Acc>(base[off]);
            if (kind_ == ReduceKind::mean) acc = static_cast<Acc>(acc / static_cast<Acc>(p.red_count));
            y[o] = static_cast<T>(acc);
          } else {
            T acc = base[red_off[0]];
            for (auto off : red_off) {
              const T v = base[off];
              if constexpr (std::is_floating_point_v<T>) {
                if (v != v) { acc = v; break; }  // NaN propagates
              }
              acc = kind_ == ReduceKind::max ? (v > acc ? v : acc) : (v < acc ? v : acc);
            }
            y[o] = acc;
          }
        }
      });
      return 0;
    });
  }
  const std::vector<int>& axes() const { return axes_; }
  bool keepdims() const { return keepdims_; }

 private:
  ReduceKind kind_;
  std::vector<int> axes_;
  bool keepdims_;
};

// Broadcasts g to like's run-time shape. `inserted` lists like's axes that g lacks (a
// reduction without keepdims); empty means right-aligned numpy broadcasting. With
// `mean`, divides by the number of elements each g element was averaged over.
class BroadcastToOp final : public Op {
 public:
  BroadcastToOp(std::vector<int> inserted, bool mean) : inserted_(std::move(inserted)), mean_(mean) {}
  std::string name() const override { return mean_ ? "broadcast_mean_grad" : "broadcast_to"; }
  std::string params() const override { return axes_text(inserted_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 2) throw ValueError(msg(name(), ": expects (value, like), got ", in.size(), " inputs"));
    TensorType out = in[1];
    out.dtype = in[0].dtype;
    const Shape g = expanded(in[0].shape, in[1].rank());
    detail::broadcast_shapes(g, in[1].shape, name());  // validates
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    Var G = g;
    if (mean_)  // d(g / count)/dg = 1 / count, broadcast the same way as the forward
      G = g * apply(std::make_shared<BroadcastToOp>(inserted_, true), {ones_like(in[0]), in[1]});
    return {inserted_.empty() ? sum_to(G, in[0]) : sum(G, inserted_, false), Var()};
  }
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>& in) const override {
    return d == DeviceKind::cuda && (mean_ ? in[0].dtype == DType::float32 || in[0].dtype == DType::float64
                                           : gpu::elementwise_dtype_supported(in[0].dtype));
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    Tensor g = in[0].reshape(expanded(in[0].shape(), out.rank()));
    // Pad to full rank, then copy with zero strides along broadcast axes.
    const Shape& os = out.shape();
    std::vector<std::int64_t> gst(os.size(), 0);
    {
      const Shape& gs = g.shape();
      const std::size_t lead = os.size() - gs.size();
      std::int64_t acc = 1;
      for (std::size_t i = gs.size(); i-- > 0;) {
        gst[i + lead] = gs[i] == 1 ? 0 : acc;
        acc *= gs[i];
      }
    }
    double scale = 1.0;
    if (mean_) {
      std::int64_t count = 1;
      for (int a : inserted_) count *= os[static_cast<std::size_t>(a)];
      if (inserted_.empty()) count = out.numel() / std::max<std::int64_t>(1, in[0].numel());
      scale = 1.0 / static_cast<double>(std::max<std::int64_t>(count, 1));
    }
    if (out.device() == DeviceKind::cuda) return gpu::broadcast_copy(g, out, scale, ctx.stream);
    dispatch_dtype(out.dtype(), name().c_str(), [&](auto z) {
      using T = decltype(z);
      const T* src = static_cast<const T*>(g.raw());
      T* dst = static_cast<T*>(out.raw());
      detail::parallel_range(ctx, out.numel(), 1 << 14, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          std::int64_t idx = i, off = 0;
          for (std::size_t a = os.size(); a-- > 0;) {
            off += (idx % os[a]) * gst[a];
            idx /= os[a];
          }
          if constexpr (std::is_same_v<T, bool>) dst[i] = src[off];
          else dst[i] = mean_ ? static_cast<T>(static_cast<double>(src[off]) * scale) : src[off];
        }
      });
      return 0;
    });
  }

 private:
  // g's shape with length-1 axes re-inserted at the reduced positions.
  Shape expanded(const Shape& g, int like_rank) const {
    if (inserted_.empty()) return g;
    Shape s;
    std::size_t k = 0;
    for (int i = 0; i < like_rank; ++i) {
      if (std::find(inserted_.begin(), inserted_.end(), i) != inserted_.end()) s.push_back(1);
      else if (k < g.size()) s.push_back(g[k++]);
    }
    return s;
  }
  std::vector<int> inserted_;
  bool mean_;
};

// Sums g over the axes along which a value of type `like` was broadcast to g's shape.
class SumToOp final : public Op {
 public:
  std::string name() const override { return "sum_to"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 2) throw ValueError(msg("sum_to: expects (value, like), got ", in.size(), " inputs"));
    if (in[1].rank() > in[0].rank())
      throw ShapeError(msg("sum_to: target ", in[1].to_string(), " has a higher rank than ", in[0].to_string()));
    TensorType out = in[1];
    out.dtype = in[0].dtype;
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    return {broadcast_like(g, in[0]), Var()};
  }
  // perform() runs a ReduceOp, which picks the GPU kernel itself for a cuda output.
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>& in) const override {
    return d == DeviceKind::cuda && gpu::elementwise_dtype_supported(in[0].dtype);
  }
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const Shape& gs = in[0].shape();
    const Shape& ts = out.shape();
    const std::size_t lead = gs.size() - ts.size();
    std::vector<int> axes;
    for (std::size_t i = 0; i < gs.size(); ++i)
      if (i < lead || (ts[i - lead] == 1 && gs[i] != 1)) axes.push_back(static_cast<int>(i));
      else if (ts[i - lead] != gs[i])
        throw ShapeError(msg("sum_to: cannot reduce ", shape_to_string(gs), " to ", shape_to_string(ts)));
    ReduceOp(ReduceKind::sum, axes, false).perform(in, out, ctx);  // same element order
  }
};

class FillLikeOp final : public Op {
 public:
  explicit FillLikeOp(double v) : value_(v) {}
  std::string name() const override { return value_ == 0 ? "zeros_like" : value_ == 1 ? "ones_like" : "fill_like"; }
  std::string params() const override { return std::to_string(value_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 1) throw ValueError(msg(name(), ": expects 1 input"));
    return in[0];
  }
  std::vector<Var> grad(const std::vector<Var>&, const Var&, const Var&) const override { return {Var()}; }
  bool has_device_kernel(DeviceKind d, const std::vector<TensorType>&) const override { return d == DeviceKind::cuda; }
  void perform(const std::vector<Tensor>&, Tensor& out, const ExecContext& ctx) const override {
    if (out.device() == DeviceKind::cuda) return gpu::fill(out, value_, ctx.stream);
    dispatch_dtype(out.dtype(), "fill", [&](auto z) {
      using T = decltype(z);
      std::fill_n(static_cast<T*>(out.raw()), out.numel(), static_cast<T>(value_));
      return 0;
    });
  }

 private:
  double value_;
};

Var reduce(ReduceKind k, const Var& x, std::vector<int> axes, bool keepdims) {
  if (!x.defined()) throw ValueError(msg(reduce_name(k), ": undefined variable"));
  if (axes.empty())
    for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
  axes = detail::normalize_axes(std::move(axes), x.rank(), reduce_name(k));
  return apply(std::make_shared<ReduceOp>(k, std::move(axes), keepdims), {x});
}

std::vector<Var> ReduceOp::grad(const std::vector<Var>& in, const Var& out, const Var& g) const {
  const Var& x = in[0];
  if (!is_float(x.dtype())) return {Var()};
  const std::vector<int> inserted = keepdims_ ? std::vector<int>{} : axes_;
  auto back = [&](const Var& v, bool mean) { return apply(std::make_shared<BroadcastToOp>(inserted, mean), {v, x}); };
  switch (kind_) {
    case ReduceKind::sum: return {back(g, false)};
    case ReduceKind::mean: return {back(g, true)};
    default: {
      // The gradient flows to every element equal to the extremum (ties share it).
      const Var hit = eq(x, back(out, false));
      return {where(hit, back(g, false), zeros_like(x))};
    }
  }
}

}  // namespace

Var sum(const Var& x, std::vector<int> axes, bool keepdims) { return reduce(ReduceKind::sum, x, std::move(axes), keepdims); }
Var mean(const Var& x, std::vector<int> axes, bool keepdims) { return reduce(ReduceKind::mean, x, std::move(axes), keepdims); }
Var max(const Var& x, std::vector<int> axes, bool keepdims) { return reduce(ReduceKind::max, x, std::move(axes), keepdims); }
Var min(const Var& x, std::vector<int> axes, bool keepdims) { return reduce(ReduceKind::min, x, std::move(axes), keepdims); }

Var sum_to(const Var& g, const Var& like) {
  if (!g.defined() || !like.defined()) throw ValueError("sum_to: undefined variable");
  if (g.shape() == like.shape() && like.type().fully_known()) return g;
  return apply(std::make_shared<SumToOp>(), {g, like});
}

Var broadcast_like(const Var& x, const Var& like) {
  if (x.shape() == like.shape() && like.type().fully_known()) return x;
  return apply(std::make_shared<BroadcastToOp>(std::vector<int>{}, false), {x, like});
}

Var zeros_like(const Var& x) { return apply(std::make_shared<FillLikeOp>(0.0), {x}); }
Var ones_like(const Var& x) { return apply(std::make_shared<FillLikeOp>(1.0), {x}); }

}  // namespace convgraph
