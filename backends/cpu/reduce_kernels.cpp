// CPU kernels of the reduction family (ops/reduce.cpp): KernelRegistry keys "reduce",
// "sum_to", "broadcast_to" and "fill".
#include <algorithm>
#include <type_traits>

#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/kernel_util.hpp"
#include "ops/reduce_info.hpp"

namespace convgraph {

namespace {

using detail::ReduceKind;

// out = reduce(x) over `axes`: each output element walks its inputs through the strides of
// the kept and the reduced sub-shapes.
void reduce_cpu(ReduceKind kind, const std::vector<int>& axes, const Tensor& in, Tensor& out, const ExecContext& ctx) {
  const char* name = detail::reduce_name(kind);
  const Shape& s = in.shape();
  std::vector<bool> reduced(s.size(), false);
  for (int a : axes) reduced[static_cast<std::size_t>(a)] = true;
  std::int64_t out_count = 1, red_count = 1;
  for (std::size_t i = 0; i < s.size(); ++i) (reduced[i] ? red_count : out_count) *= s[i];
  detail::dispatch_dtype(in.dtype(), name, [&](auto z) {
    using T = decltype(z);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    const T* x = in.data<T>();
    T* y = static_cast<T*>(out.raw());
    if ((kind == ReduceKind::max || kind == ReduceKind::min) && red_count == 0)
      throw ValueError(msg(name, ": zero-size reduction of ", shape_to_string(s), " has no identity"));
    Shape kept, red;
    std::vector<std::int64_t> kst, rst;
    const Shape st = contiguous_strides(s);
    for (std::size_t i = 0; i < s.size(); ++i) {
      (reduced[i] ? red : kept).push_back(s[i]);
      (reduced[i] ? rst : kst).push_back(st[i]);
    }
    auto base_of = [](std::int64_t idx, const Shape& sh, const std::vector<std::int64_t>& stv) {
      std::int64_t off = 0;
      for (std::size_t a = sh.size(); a-- > 0;) {
        off += (idx % sh[a]) * stv[a];
        idx /= sh[a];
      }
      return off;
    };
    std::vector<std::int64_t> red_off(static_cast<std::size_t>(red_count));
    for (std::int64_t j = 0; j < red_count; ++j) red_off[static_cast<std::size_t>(j)] = base_of(j, red, rst);
    detail::parallel_range(ctx, out_count, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, red_count)),
                           [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t o = b; o < e; ++o) {
        const T* base = x + base_of(o, kept, kst);
        if (kind == ReduceKind::sum || kind == ReduceKind::mean) {
          Acc acc{};
          for (auto off : red_off) acc += static_cast<Acc>(base[off]);
          if (kind == ReduceKind::mean) acc = static_cast<Acc>(acc / static_cast<Acc>(red_count));
          y[o] = static_cast<T>(acc);
        } else {
          T acc = base[red_off[0]];
          for (auto off : red_off) {
            const T v = base[off];
            if constexpr (std::is_floating_point_v<T>) {
              if (v != v) { acc = v; break; }  // NaN propagates
            }
            acc = kind == ReduceKind::max ? (v > acc ? v : acc) : (v < acc ? v : acc);
          }
          y[o] = acc;
        }
      }
    });
    return 0;
  });
}

void run_reduce(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::ReduceAttrs& a = detail::reduce_attrs(op);
  reduce_cpu(a.kind, a.axes, in[0], out, ctx);
}

void run_sum_to(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  reduce_cpu(ReduceKind::sum, detail::sum_to_axes(in[0].shape(), out.shape()), in[0], out, ctx);
}

void run_broadcast_to(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::BroadcastAttrs& attrs = detail::broadcast_attrs(op);
  const Tensor g = in[0].reshape(attrs.source_shape(in[0].shape(), out.rank()));
  const double scale = attrs.scale(in[0].shape(), out.shape());
  // g right-aligned to the output, with zero strides along broadcast axes.
  const Shape& os = out.shape();
  std::vector<std::int64_t> gst(os.size(), 0);
  const Shape& gs = g.shape();
  const std::size_t lead = os.size() - gs.size();
  std::int64_t acc = 1;
  for (std::size_t i = gs.size(); i-- > 0;) {
    gst[i + lead] = gs[i] == 1 ? 0 : acc;
    acc *= gs[i];
  }
  detail::dispatch_dtype(out.dtype(), op.name().c_str(), [&](auto z) {
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
        else dst[i] = attrs.mean ? static_cast<T>(static_cast<double>(src[off]) * scale) : src[off];
      }
    });
    return 0;
  });
}

void run_fill(const Op& op, const std::vector<Tensor>&, Tensor& out, const ExecContext&) {
  const double v = detail::fill_value(op);
  detail::dispatch_dtype(out.dtype(), "fill", [&](auto z) {
    using T = decltype(z);
    std::fill_n(static_cast<T*>(out.raw()), out.numel(), static_cast<T>(v));
    return 0;
  });
}

}  // namespace

void register_cpu_reduce_kernels(KernelRegistry& r) {
  r.add("reduce", DeviceKind::cpu, {nullptr, run_reduce});
  r.add("sum_to", DeviceKind::cpu, {nullptr, run_sum_to});
  r.add("broadcast_to", DeviceKind::cpu, {nullptr, run_broadcast_to});
  r.add("fill", DeviceKind::cpu, {nullptr, run_fill});
}

}  // namespace convgraph
