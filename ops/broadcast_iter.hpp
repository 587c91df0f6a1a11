#pragma once
// Broadcasting loops for elementwise kernels. The output is contiguous; inputs are
// contiguous with numpy-broadcast shapes. Work is split into rows along the last axis,
// and the inner loop is specialised on whether each operand advances, so the common
// cases (same shape, scalar operand, bias along the last axis) vectorise.
#include <vector>

#include "ops/kernel_util.hpp"

namespace convgraph::detail {

/// Element strides of `in` seen through the output's shape (0 along broadcast axes).
inline std::vector<std::int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<std::int64_t> st(out.size(), 0);
  std::int64_t acc = 1;
  const std::size_t lead = out.size() - in.size();
  for (std::size_t i = in.size(); i-- > 0;) {
    st[i + lead] = (in[i] == 1 && out[i + lead] != 1) ? 0 : acc;
    acc *= in[i];
  }
  return st;
}

struct RowPlan {
  std::int64_t rows = 1, width = 1;
  Shape outer;                                   // out shape without the last axis
  std::vector<std::vector<std::int64_t>> strides;  // per operand, per axis
  std::int64_t offset(std::size_t operand, std::int64_t row) const {
    std::int64_t off = 0;
    const auto& st = strides[operand];
    for (std::size_t a = outer.size(); a-- > 0;) {
      off += (row % outer[a]) * st[a];
      row /= outer[a];
    }
    return off;
  }
  std::int64_t inner_stride(std::size_t operand) const {
    return strides[operand].empty() ? 0 : strides[operand].back();
  }
};

inline RowPlan plan_rows(const std::vector<const Tensor*>& ins, const Tensor& out) {
  RowPlan p;
  const Shape& os = out.shape();
  bool all_same = true;
  for (auto* t : ins) all_same = all_same && t->shape() == os;
  if (all_same || os.empty()) {  // one flat row
    p.width = out.numel();
    p.strides.assign(ins.size(), std::vector<std::int64_t>{1});
    for (std::size_t i = 0; i < ins.size(); ++i)
      if (ins[i]->numel() == 1 && p.width != 1) p.strides[i] = {0};
    return p;
  }
  p.width = os.back();
  p.outer.assign(os.begin(), os.end() - 1);
  p.rows = numel(p.outer);
  for (auto* t : ins) p.strides.push_back(broadcast_strides(t->shape(), os));
  return p;
}

template <class TA, class TB, class TO, class F>
void broadcast_apply(const Tensor& a, const Tensor& b, Tensor& out, const ExecContext& ctx, F f) {
  const RowPlan p = plan_rows({&a, &b}, out);
  const TA* pa = static_cast<const TA*>(a.raw());
  const TB* pb = static_cast<const TB*>(b.raw());
  TO* po = static_cast<TO*>(out.raw());
  const std::int64_t sa = p.inner_stride(0), sb = p.inner_stride(1), w = p.width;
  auto row = [&](std::int64_t r) {
    const TA* x = pa + (p.rows > 1 ? p.offset(0, r) : 0);
    const TB* y = pb + (p.rows > 1 ? p.offset(1, r) : 0);
    TO* o = po + r * w;
    if (sa == 1 && sb == 1) for (std::int64_t j = 0; j < w; ++j) o[j] = f(x[j], y[j]);
    else if (sa == 1) for (std::int64_t j = 0; j < w; ++j) o[j] = f(x[j], y[0]);
    else if (sb == 1) for (std::int64_t j = 0; j < w; ++j) o[j] = f(x[0], y[j]);
    else for (std::int64_t j = 0; j < w; ++j) o[j] = f(x[0], y[0]);
  };
  if (p.rows == 1) {  // split the single row into chunks
    parallel_range(ctx, w, 1 << 14, [&](std::int64_t s, std::int64_t e) {
      const TA* x = pa + (sa ? s : 0);
      const TB* y = pb + (sb ? s : 0);
      TO* o = po + s;
      const std::int64_t n = e - s;
      if (sa && sb) for (std::int64_t j = 0; j < n; ++j) o[j] = f(x[j], y[j]);
      else if (sa) for (std::int64_t j = 0; j < n; ++j) o[j] = f(x[j], y[0]);
      else if (sb) for (std::int64_t j = 0; j < n; ++j) o[j] = f(x[0], y[j]);
      else for (std::int64_t j = 0; j < n; ++j) o[j] = f(x[0], y[0]);
    });
    return;
  }
  parallel_range(ctx, p.rows, std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(w, 1)),
                 [&](std::int64_t s, std::int64_t e) {
                   for (std::int64_t r = s; r < e; ++r) row(r);
                 });
}

template <class T>
void broadcast_apply3(const Tensor& c, const Tensor& a, const Tensor& b, Tensor& out, const ExecContext& ctx) {
  const RowPlan p = plan_rows({&c, &a, &b}, out);
  const bool* pc = static_cast<const bool*>(c.raw());
  const T* pa = static_cast<const T*>(a.raw());
  const T* pb = static_cast<const T*>(b.raw());
  T* po = static_cast<T*>(out.raw());
  const std::int64_t sc = p.inner_stride(0), sa = p.inner_stride(1), sb = p.inner_stride(2), w = p.width;
  parallel_range(ctx, p.rows, 1, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t r = s; r < e; ++r) {
      const bool* x = pc + (p.rows > 1 ? p.offset(0, r) : 0);
      const T* y = pa + (p.rows > 1 ? p.offset(1, r) : 0);
      const T* z = pb + (p.rows > 1 ? p.offset(2, r) : 0);
      T* o = po + r * w;
      for (std::int64_t j = 0; j < w; ++j) o[j] = x[j * sc] ? y[j * sa] : z[j * sb];
    }
  });
}

}  // namespace convgraph::detail
