// The allreduce graph op as two nodes, allreduce_start (pack a bucket of tensors, start a
// non-blocking reduction of it) and allreduce_wait (wait for it, write one tensor of the
// bucket), and the builders on top: allreduce(), allreduce_gradients(), data_parallel().
// A bucket's two ops share a BucketState: the reduction in flight between them.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "convgraph/dist/mpi.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "dist/comm.hpp"

namespace convgraph::dist {

namespace {

const char* op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "mean"; }

std::atomic<std::uint64_t> g_bucket_serial{0};

struct BucketState {
  std::mutex mu;
  std::unique_ptr<detail::Pending> pending;  ///< started, not yet waited for
  std::int64_t agreed_count = -1;            ///< element count every rank was found to hold
  std::uint64_t serial = g_bucket_serial.fetch_add(1);  ///< unique: merge never joins buckets
  ReduceOp op = ReduceOp::sum;
};

/// The argument checks shared by the builders and the ops' type inference.
void check_reducible(const std::string& who, const std::string& arg, DType t, ReduceOp op) {
  if (t != DType::float32 && t != DType::float64 && t != DType::int32 && t != DType::int64)
    throw TypeError(msg(who, ": ", arg, " has dtype ", dtype_name(t), "; allreduce takes float32, float64, int32 or int64"));
  if (op == ReduceOp::mean && !is_float(t))
    throw TypeError(msg(who, ": op mean needs a float dtype but ", arg, " is ", dtype_name(t), " (use sum)"));
}

struct Piece {
  std::int64_t offset = 0;  ///< in elements, within the bucket
  Shape shape;
};

/// inputs: [the previous bucket's start (order only),] the bucket's tensors. Output: the
/// bucket, x's own shape for one tensor, else flat; being reduced in place until the wait.
class AllreduceStartOp final : public Op {
 public:
  AllreduceStartOp(std::shared_ptr<BucketState> s, bool after, std::vector<Piece> pieces)
      : state_(std::move(s)), after_(after), pieces_(std::move(pieces)) {}

  std::string name() const override { return "allreduce_start"; }
  std::string params() const override {
    return msg("bucket=", state_->serial, ",op=", op_name(state_->op), ",tensors=", pieces_.size(), ",after=", after_);
  }
  TensorType infer(const std::vector<TensorType>& in) const override {
    const std::size_t first = after_ ? 1 : 0;
    if (in.size() != first + pieces_.size())
      throw ValueError(msg("allreduce_start: expected ", first + pieces_.size(), " inputs, got ", in.size()));
    const TensorType& x = in[first];
    for (std::size_t i = first; i < in.size(); ++i) {
      check_reducible("allreduce_start", msg("input ", i), in[i].dtype, state_->op);
      if (in[i].dtype != x.dtype || in[i].device != x.device)
        throw TypeError(msg("allreduce_start: input ", i, " is ", in[i].to_string(), " but input ", first, " is ",
                            x.to_string(), "; a bucket holds one dtype on one device"));
    }
    if (pieces_.size() == 1) return x;
    std::int64_t total = 0;
    for (std::size_t i = first; i < in.size(); ++i) total += numel(in[i].shape);  // known: checked when built
    return TensorType{x.dtype, {total}, x.device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override {
    std::vector<Var> g(in.size());
    const std::size_t first = after_ ? 1 : 0;
    if (pieces_.size() == 1) {
      g[first] = gy;
      return g;
    }
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      const Piece& p = pieces_[k];
      g[first + k] = reshape(slice(gy, 0, p.offset, p.offset + numel(p.shape)), p.shape);
    }
    return g;
  }
  bool foldable() const override { return false; }
  bool has_device_kernel(DeviceKind, const std::vector<TensorType>&) const override { return nccl_built(); }

  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    detail::require_mpi("allreduce");
    const std::size_t first = after_ ? 1 : 0;
    const std::size_t esize = dtype_size(out.dtype());
    const bool device = out.device() != DeviceKind::cpu;
    std::int64_t at = 0;
    for (std::size_t i = first; i < in.size(); ++i) {
      auto* dst = static_cast<char*>(out.raw()) + at * static_cast<std::int64_t>(esize);
      if (device) detail::device_copy(dst, in[i].raw(), in[i].nbytes(), ctx.stream);
      else if (in[i].nbytes()) std::memcpy(dst, in[i].raw(), in[i].nbytes());
      at += in[i].numel();
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->pending) state_->pending->wait();  // a call that failed before its wait
    state_->pending.reset();
    if (state_->agreed_count != at) {  // once per element count: every rank must reduce as many
      std::int64_t lo = 0, hi = 0;
      detail::min_max(at, lo, hi);
      if (lo != hi)
        throw ValueError(msg("allreduce: the reduced tensor", pieces_.size() > 1 ? "s hold " : " has ", at,
                             " elements on rank ", rank(), " but between ", lo, " and ", hi,
                             " across the ranks; every rank must pass the same shapes"));
      state_->agreed_count = at;
    }
    if (device) detail::nccl_allreduce(out.raw(), at, out.dtype(), state_->op == ReduceOp::mean, ctx.stream);
    else state_->pending = detail::start_sum(out.raw(), at, out.dtype());
  }

 private:
  std::shared_ptr<BucketState> state_;
  bool after_;
  std::vector<Piece> pieces_;
};

template <class T>
void copy_scaled(const T* src, T* dst, std::int64_t n, T divisor) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i] / divisor;
}

/// input: the bucket (an allreduce_start). Output: tensor `index` of the bucket, reduced.
class AllreduceWaitOp final : public Op {
 public:
  AllreduceWaitOp(std::shared_ptr<BucketState> s, std::size_t index, Piece piece, bool single)
      : state_(std::move(s)), index_(index), piece_(std::move(piece)), single_(single) {}

  std::string name() const override { return "allreduce_wait"; }
  std::string params() const override {
    return msg("bucket=", state_->serial, ",op=", op_name(state_->op), ",tensor=", index_);
  }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 1) throw ValueError(msg("allreduce_wait: expected 1 input, got ", in.size()));
    return single_ ? in[0] : TensorType{in[0].dtype, piece_.shape, in[0].device};
  }
  // d/d(bucket): the all-reduce of the output gradient, at this tensor's place in the bucket.
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override {
    if (single_) return {allreduce(gy, state_->op)};
    const std::int64_t n = numel(piece_.shape), total = in[0].shape()[0];
    return {allreduce(pad(reshape(gy, {n}), {{piece_.offset, total - piece_.offset - n}}), state_->op)};
  }
  bool foldable() const override { return false; }
  bool has_device_kernel(DeviceKind, const std::vector<TensorType>&) const override { return nccl_built(); }

  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->pending) {  // the bucket's first wait; the others find it done
        std::unique_ptr<detail::Pending> p = std::move(state_->pending);
        p->wait();
      }
    }
    const std::size_t esize = dtype_size(out.dtype());
    const char* src = static_cast<const char*>(in[0].raw()) + piece_.offset * static_cast<std::int64_t>(esize);
    if (out.device() != DeviceKind::cpu) {  // NCCL averaged already, in stream order
      detail::device_copy(out.raw(), src, out.nbytes(), ctx.stream);
      return;
    }
    const std::int64_t n = out.numel();
    if (state_->op == ReduceOp::sum || size() == 1) {
      if (out.nbytes()) std::memcpy(out.raw(), src, out.nbytes());
    } else if (out.dtype() == DType::float32) {
      copy_scaled(reinterpret_cast<const float*>(src), out.data<float>(), n, static_cast<float>(size()));
    } else {
      copy_scaled(reinterpret_cast<const double*>(src), out.data<double>(), n, static_cast<double>(size()));
    }
  }

 private:
  std::shared_ptr<BucketState> state_;
  std::size_t index_;
  Piece piece_;
  bool single_;
};

/// Reduces xs in the given buckets (lists of indices into xs), each bucket's start after
/// the previous one's; returns the reduced value of every x.
std::vector<Var> reduce_in_buckets(const std::vector<Var>& xs, const std::vector<std::vector<std::size_t>>& buckets,
                                   ReduceOp op) {
  std::vector<Var> out(xs.size());
  Var prev;
  for (const auto& bucket : buckets) {
    auto state = std::make_shared<BucketState>();
    state->op = op;
    std::vector<Var> ins;
    if (prev.defined()) ins.push_back(prev);
    std::vector<Piece> pieces;
    std::int64_t at = 0;
    for (std::size_t i : bucket) {
      ins.push_back(xs[i]);
      pieces.push_back({at, xs[i].shape()});
      if (bucket.size() > 1) at += numel(xs[i].shape());
    }
    const Var start = convgraph::apply(std::make_shared<AllreduceStartOp>(state, prev.defined(), pieces), ins);
    for (std::size_t k = 0; k < bucket.size(); ++k)
      out[bucket[k]] = convgraph::apply(std::make_shared<AllreduceWaitOp>(state, k, pieces[k], bucket.size() == 1),
                                        {start}, xs[bucket[k]].name());
    prev = start;
  }
  return out;
}

/// Buckets for xs: in creation order (the order the backward pass produces gradients),
/// same dtype and device, up to bucket_bytes each; a tensor of unknown shape alone.
std::vector<std::vector<std::size_t>> make_buckets(const std::vector<Var>& xs, std::size_t bucket_bytes) {
  std::vector<std::size_t> order(xs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return xs[a].node()->id < xs[b].node()->id; });
  std::vector<std::vector<std::size_t>> buckets;
  std::size_t bytes = 0;
  bool open = false;  // the last bucket may take more
  for (std::size_t i : order) {
    const TensorType& t = xs[i].type();
    const std::size_t b = t.fully_known() ? static_cast<std::size_t>(numel(t.shape)) * dtype_size(t.dtype) : 0;
    const TensorType* last = open ? &xs[buckets.back().front()].type() : nullptr;
    if (last && t.fully_known() && last->dtype == t.dtype && last->device == t.device && bytes + b <= bucket_bytes) {
      buckets.back().push_back(i);
      bytes += b;
    } else {
      buckets.push_back({i});
      bytes = b;
    }
    open = t.fully_known();
  }
  return buckets;
}

}  // namespace

Var allreduce(const Var& x, ReduceOp op) {
  if (!x.defined()) throw ValueError("allreduce: x is an undefined variable");
  check_reducible("allreduce", "x", x.dtype(), op);
  return reduce_in_buckets({x}, std::vector<std::vector<std::size_t>>(1, std::vector<std::size_t>{0}), op)[0];
}

namespace {

std::vector<Var> reduce_all(const std::string& who, const std::vector<Var>& xs, const DataParallelOptions& o,
                            const std::vector<std::string>& what) {
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined()) throw ValueError(msg(who, ": ", what[i], " is an undefined variable"));
    check_reducible(who, what[i], xs[i].dtype(), o.op);
  }
  return reduce_in_buckets(xs, make_buckets(xs, o.bucket_bytes), o.op);
}

std::string grad_label(std::size_t i, const Var& g) {
  if (!g.defined() || g.name().empty()) return msg("gradient ", i);
  return msg("gradient ", i, " ('", g.name(), "')");
}

}  // namespace

std::vector<Var> allreduce_gradients(const std::vector<Var>& grads, const DataParallelOptions& options) {
  std::vector<std::string> what;
  for (std::size_t i = 0; i < grads.size(); ++i) what.push_back(grad_label(i, grads[i]));
  return reduce_all("allreduce_gradients", grads, options, what);
}

Updates data_parallel(const Updates& updates, const std::vector<Var>& grads, const DataParallelOptions& options) {
  std::unordered_map<const Node*, std::size_t> grad_at;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) throw ValueError(msg("data_parallel: ", grad_label(i, grads[i]), " is an undefined variable"));
    grad_at.emplace(grads[i].node(), i);
  }
  std::vector<Var> values;
  for (std::size_t u = 0; u < updates.size(); ++u) {
    if (!updates[u].second.defined()) throw ValueError(msg("data_parallel: the value of update ", u, " is undefined"));
    values.push_back(updates[u].second);
  }
  // Which nodes depend on a gradient (inputs come first in this order).
  const std::vector<Var> order = topological_order(values);
  std::unordered_map<const Node*, bool> tainted;
  for (const Var& v : order) {
    bool t = grad_at.count(v.node()) > 0;
    for (const Var& in : v.inputs()) t = t || tainted.at(in.node());
    tainted[v.node()] = t;
  }
  // What to reduce: every gradient (once), and the float state the gradients do not reach.
  std::vector<Var> xs;
  std::vector<std::string> what;
  std::unordered_map<const Node*, std::size_t> reduced_at;
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (reduced_at.emplace(grads[i].node(), xs.size()).second) {
      xs.push_back(grads[i]);
      what.push_back(grad_label(i, grads[i]));
    }
  if (options.average_state)
    for (std::size_t u = 0; u < updates.size(); ++u) {
      const Var& v = updates[u].second;
      if (!tainted.at(v.node()) && is_float(v.dtype()) && reduced_at.emplace(v.node(), xs.size()).second) {
        xs.push_back(v);
        what.push_back(msg("the value of update ", u));
      }
    }
  const std::vector<Var> reduced = reduce_all("data_parallel", xs, options, what);

  // Rebuild the update values over the reduced tensors; untouched subgraphs are shared.
  std::unordered_map<const Node*, Var> now;
  std::vector<bool> used(grads.size(), false);
  for (const Var& v : order) {
    auto r = reduced_at.find(v.node());
    if (r != reduced_at.end()) {
      now[v.node()] = reduced[r->second];
      auto g = grad_at.find(v.node());
      if (g != grad_at.end()) used[g->second] = true;
      continue;
    }
    std::vector<Var> ins;
    bool changed = false;
    for (const Var& in : v.inputs()) {
      ins.push_back(now.at(in.node()));
      changed = changed || !ins.back().same(in);
    }
    now[v.node()] = changed ? convgraph::apply(v.node()->op, ins, v.name()) : v;
  }
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (!used[i] && !used[grad_at.at(grads[i].node())])
      throw ValueError(msg("data_parallel: ", grad_label(i, grads[i]),
                           " is used by no update value; pass the gradients the updates were built from"));
  Updates out;
  for (const auto& [var, value] : updates) out.emplace_back(var, now.at(value.node()));
  return out;
}

}  // namespace convgraph::dist
