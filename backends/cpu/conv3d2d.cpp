// "cpu.conv3d2d": a 3D convolution computed as sums of 2D convolutions over depth.
//
// For kernel depth tap t, output depth od reads input depth id = od*sd + t*dd - pad_d.
// Every (od, t) pair is a 2D problem on the planes x[:, :, id] and y[:, :, od] with the
// filter slice w[:, :, t'] (t' = kD-1-t when flipping: the 2D problem flips only H and W).
// For one tap all valid od share the filter slice, so they are stacked into the batch of
// ONE 2D call (batch N*nod): kD calls instead of OD*kD. The 2D work goes to the first
// applicable of cpu.corrmm / cpu.direct in the built-in registry; the depth axis (stride,
// dilation, padding) is only index arithmetic here.
//   forward:      y[:, :, od]  += conv2d(x[:, :, id], w[:, :, t'])
//   grad_inputs:  dx[:, :, id] += conv2d_grad_inputs(dy[:, :, od], w[:, :, t'])
//   grad_weights: dw[:, :, t'] += conv2d_grad_weights(x[:, :, id], dy[:, :, od])  (the 2D
//                 grad-weights call already sums over its batch, i.e. over n and od)
#include <algorithm>
#include <cstring>

#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "core/checked_math.hpp"

namespace convgraph {
namespace {

using i64 = std::int64_t;
constexpr const char* kDelegates[] = {"cpu.corrmm", "cpu.direct"};
/// Largest stacked batch buffers we ask for when the limit allows more (they only save calls).
constexpr std::size_t kSoftCap = std::size_t{256} << 20;

std::size_t align_up(std::size_t v) { return (v + 63) / 64 * 64; }

struct Plan {
  const ConvAlgorithm* delegate = nullptr;
  ConvProblem sub;  ///< the 2D problem for a full chunk (batch N * chunk)
  i64 chunk = 0;    ///< output depths stacked per 2D call
  std::size_t xb = 0, yb = 0, wb = 0, sb = 0, total = 0;  ///< byte offsets, total size
  std::string why;  ///< reason when no plan fits
};

ConvProblem sub_problem(const ConvProblem& p, i64 batch) {
  ConvProblem s = p;
  s.ndim = 2;
  s.N = batch;
  for (std::size_t a = 0; a < 3; ++a) {
    const bool used = a < 2;
    s.in[a] = used ? p.in[a + 1] : 1;
    s.kernel[a] = used ? p.kernel[a + 1] : 1;
    s.out[a] = used ? p.out[a + 1] : 1;
    s.stride[a] = used ? p.stride[a + 1] : 1;
    s.dilation[a] = used ? p.dilation[a + 1] : 1;
    s.pad_pre[a] = used ? p.pad_pre[a + 1] : 0;
    s.pad_post[a] = used ? p.pad_post[a + 1] : 0;
  }
  return s;
}

/// Buffers for `chunk` stacked depths plus the delegate's workspace; picks the largest
/// chunk that fits.
Plan make_plan(const ConvProblem& p) {
  Plan best;
  const std::size_t es = dtype_size(p.dtype);
  const i64 xplane = p.C * p.in[1] * p.in[2], yplane = p.K * p.out[1] * p.out[2];
  const i64 wslice = p.K * p.Cg() * p.kernel[1] * p.kernel[2];
  const std::size_t cap = std::min(p.workspace_limit, kSoftCap);
  for (i64 chunk = p.out[0]; chunk >= 1; chunk = chunk > 1 ? std::max<i64>(1, chunk / 2) : 0) {
    Plan pl;
    pl.chunk = chunk;
    const i64 batch = p.N * chunk;
    // Padding can make the stacked input larger than x itself: such a chunk is over any limit.
    i64 xcount = 0, xbytes = 0;
    if (!detail::try_mul(batch, xplane, xcount) || !detail::try_mul(xcount, static_cast<i64>(es), xbytes) ||
        xbytes > (i64{1} << 62)) {
      best.why = msg("cpu.conv3d2d: ", chunk, " stacked depths of the input overflow the workspace size");
      continue;
    }
    pl.xb = 0;
    pl.yb = align_up(static_cast<std::size_t>(batch * xplane) * es);
    pl.wb = pl.yb + align_up(static_cast<std::size_t>(batch * yplane) * es);
    pl.sb = pl.wb + align_up(static_cast<std::size_t>(wslice) * es);
    if (pl.sb > p.workspace_limit) {
      best.why = msg("cpu.conv3d2d: even one stacked depth needs ", pl.sb, " bytes of workspace, over the limit of ",
                     p.workspace_limit);
      continue;
    }
    pl.sub = sub_problem(p, batch);
    pl.sub.workspace_limit = p.workspace_limit - pl.sb;
    std::string reasons;
    for (const char* name : kDelegates) {
      const ConvAlgorithm* a = AlgorithmRegistry::builtin().find(name);
      if (!a) continue;
      const Status s = a->applicable(pl.sub);
      if (s) {
        pl.delegate = a;
        break;
      }
      reasons += (reasons.empty() ? "" : "; ") + s.reason();
    }
    if (!pl.delegate) {
      best.why = msg("cpu.conv3d2d: no 2D algorithm takes the depth slices (", reasons.empty() ? "none registered" : reasons, ")");
      continue;
    }
    pl.total = pl.sb + align_up(pl.delegate->workspace_bytes(pl.sub));
    if (pl.total <= cap || chunk == 1) {
      if (pl.total > p.workspace_limit) {
        best.why = msg("cpu.conv3d2d: needs ", pl.total, " bytes of workspace, over the limit of ", p.workspace_limit);
        continue;
      }
      return pl;
    }
  }
  return best;
}

/// Output depths od in [lo, hi) whose tap t reads inside the input.
void valid_range(const ConvProblem& p, i64 t, i64& lo, i64& hi) {
  const i64 s = p.stride[0], off = t * p.dilation[0] - p.pad_pre[0];  // id = od*s + off
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  const i64 last = p.in[0] - 1 - off;
  hi = last < 0 ? 0 : std::min(p.out[0], last / s + 1);
  if (hi < lo) hi = lo;
}

template <class T>
void run_typed(const ConvProblem& p, const Plan& pl, const ConvTensors& t, const ConvContext& ctx) {
  char* ws = static_cast<char*>(ctx.workspace);
  T* xb = reinterpret_cast<T*>(ws + pl.xb);
  T* yb = reinterpret_cast<T*>(ws + pl.yb);
  T* wb = reinterpret_cast<T*>(ws + pl.wb);
  ConvContext sctx = ctx;
  sctx.workspace = ws + pl.sb;
  sctx.workspace_bytes = ctx.workspace_bytes - pl.sb;
  T* x = static_cast<T*>(t.x); T* w = static_cast<T*>(t.w); T* y = static_cast<T*>(t.y);
  const i64 D = p.in[0], OD = p.out[0], KD = p.kernel[0];
  const i64 hw = p.in[1] * p.in[2], ohw = p.out[1] * p.out[2], khw = p.kernel[1] * p.kernel[2];
  const i64 wrows = p.K * p.Cg();
  ThreadPool* pool = ctx.pool;
  auto par = [&](i64 n, auto&& fn) {
    if (pool) pool->parallel_for(n, [&](i64 a, i64 b) { for (i64 i = a; i < b; ++i) fn(i); }, 4);
    else for (i64 i = 0; i < n; ++i) fn(i);
  };
  // Copies plane (n, c, depth) of a (N, Ch, Dd, plane) tensor to/from batch slot b of a
  // (batch, Ch, plane) buffer; add: accumulate into the tensor.
  auto gather = [&](const T* src, T* buf, i64 Ch, i64 Dd, i64 plane, i64 od0, i64 cnt, i64 tap, bool is_x) {
    par(p.N * cnt * Ch, [&](i64 i) {
      const i64 c = i % Ch, j = (i / Ch) % cnt, n = i / (Ch * cnt);
      const i64 od = od0 + j, d = is_x ? od * p.stride[0] + tap * p.dilation[0] - p.pad_pre[0] : od;
      std::memcpy(buf + ((n * cnt + j) * Ch + c) * plane, src + ((n * Ch + c) * Dd + d) * plane,
                  static_cast<std::size_t>(plane) * sizeof(T));
    });
  };
  auto scatter_add = [&](T* dst, const T* buf, i64 Ch, i64 Dd, i64 plane, i64 od0, i64 cnt, i64 tap, bool is_x) {
    // Different (od, tap) pairs of one call never hit the same destination plane: for a
    // fixed tap, id is injective in od.
    par(p.N * cnt * Ch, [&](i64 i) {
      const i64 c = i % Ch, j = (i / Ch) % cnt, n = i / (Ch * cnt);
      const i64 od = od0 + j, d = is_x ? od * p.stride[0] + tap * p.dilation[0] - p.pad_pre[0] : od;
      T* o = dst + ((n * Ch + c) * Dd + d) * plane;
      const T* s = buf + ((n * cnt + j) * Ch + c) * plane;
      for (i64 e = 0; e < plane; ++e) o[e] += s[e];
    });
  };
  auto slice_w = [&](i64 td, bool to_buf) {
    for (i64 r = 0; r < wrows; ++r) {
      T* ww = w + (r * KD + td) * khw;
      if (to_buf) std::memcpy(wb + r * khw, ww, static_cast<std::size_t>(khw) * sizeof(T));
      else for (i64 e = 0; e < khw; ++e) ww[e] += wb[r * khw + e];
    }
  };

  T* out = p.direction == ConvDirection::forward ? y : p.direction == ConvDirection::grad_inputs ? x : w;
  const i64 out_n = p.direction == ConvDirection::forward ? p.y_numel()
                    : p.direction == ConvDirection::grad_inputs ? p.x_numel() : p.w_numel();
  std::fill(out, out + out_n, T(0));
  for (i64 tap = 0; tap < KD; ++tap) {
    const i64 td = p.flip ? KD - 1 - tap : tap;
    i64 lo, hi;
    valid_range(p, tap, lo, hi);
    if (p.direction != ConvDirection::grad_weights && lo < hi) slice_w(td, true);
    for (i64 od0 = lo; od0 < hi; od0 += pl.chunk) {
      const i64 cnt = std::min(pl.chunk, hi - od0);
      ConvProblem sub = pl.sub;
      sub.N = p.N * cnt;
      switch (p.direction) {
        case ConvDirection::forward:
          gather(x, xb, p.C, D, hw, od0, cnt, tap, true);
          pl.delegate->run(sub, ConvTensors{xb, wb, yb, {}}, sctx);
          scatter_add(y, yb, p.K, OD, ohw, od0, cnt, tap, false);
          break;
        case ConvDirection::grad_inputs:
          gather(y, yb, p.K, OD, ohw, od0, cnt, tap, false);
          pl.delegate->run(sub, ConvTensors{xb, wb, yb, {}}, sctx);
          scatter_add(x, xb, p.C, D, hw, od0, cnt, tap, true);
          break;
        case ConvDirection::grad_weights:
          gather(x, xb, p.C, D, hw, od0, cnt, tap, true);
          gather(y, yb, p.K, OD, ohw, od0, cnt, tap, false);
          pl.delegate->run(sub, ConvTensors{xb, wb, yb, {}}, sctx);
          slice_w(td, false);
          break;
      }
    }
  }
}

class Conv3d2d final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.conv3d2d"; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv3d2d"}; }

  Status applicable(const ConvProblem& p) const override {
    if (p.ndim != 3) return Status::no(msg("cpu.conv3d2d: ", p.ndim, " spatial axes (3D only)"));
    if (p.dtype != DType::float32 && p.dtype != DType::float64)
      return Status::no(msg("cpu.conv3d2d: dtype ", dtype_name(p.dtype), " (float32 and float64 only)"));
    const Plan pl = make_plan(p);
    if (!pl.delegate) return Status::no(pl.why);
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override {
    if (p.ndim != 3) return 0;
    return make_plan(p).total;
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    const Status s = applicable(p);
    if (!s) throw ValueError(msg("cpu.conv3d2d: cannot run ", p.key(), ": ", s.reason()));
    const Plan pl = make_plan(p);
    if (ctx.workspace_bytes < pl.total || (pl.total > 0 && ctx.workspace == nullptr))
      throw MemoryError(msg("cpu.conv3d2d: workspace of ", ctx.workspace_bytes, " bytes, need ", pl.total,
                            " for ", p.key()));
    if (p.dtype == DType::float64) run_typed<double>(p, pl, t, ctx);
    else run_typed<float>(p, pl, t, ctx);
  }
};

}  // namespace

std::shared_ptr<const ConvAlgorithm> make_cpu_conv3d2d_algorithm() { return std::make_shared<Conv3d2d>(); }

}  // namespace convgraph
