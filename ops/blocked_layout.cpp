// The blocked activation layout's ops (ops/blocked_info.hpp, convgraph/ops/layout.hpp):
// to_blocked and from_blocked, each the other's gradient, and the blocked forms of the
// forward convolution and of pooling that the blocked_layout pass puts between them. One
// code path for 1-D, 2-D and 3-D: the spatial axes are whatever lies between the channel
// block axis and the block. Kernels: backends/cpu/blocked_kernels.cpp.
#include <algorithm>

#include "convgraph/ops/layout.hpp"
#include "ops/blocked_info.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph {

namespace {

constexpr std::int64_t kMaxBlock = 256;

std::int64_t blocks_of(std::int64_t c, std::int64_t b) { return c < 0 ? kUnknown : (c + b - 1) / b; }

class ToBlockedOp final : public Op {
 public:
  explicit ToBlockedOp(std::int64_t block) : block_(block) {
    if (block < 1 || block > kMaxBlock)
      throw ValueError(msg("to_blocked: block must be in [1, ", kMaxBlock, "], got ", block));
  }
  std::string name() const override { return "to_blocked"; }
  std::string params() const override { return msg("block=", block_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 1);
    const TensorType& x = in[0];
    detail::check_dtype(name(), "x", x.dtype, {DType::float32, DType::float64});
    if (x.rank() < 2)
      throw ShapeError(msg("to_blocked: x must have rank >= 2 (N, C, spatial...), got shape ", shape_to_string(x.shape)));
    TensorType out = x;
    out.shape[1] = blocks_of(x.shape[1], block_);
    out.shape.push_back(block_);
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    const std::int64_t c = in[0].shape()[1];
    if (c < 0)
      throw ShapeError(msg("to_blocked: the gradient needs x's channel count known when the graph is built, got x ",
                           in[0].type().to_string()));
    return {from_blocked(g, c)};
  }
  std::string_view kernel_key() const override { return "to_blocked"; }
  std::int64_t block() const { return block_; }

 private:
  std::int64_t block_;
};

class FromBlockedOp final : public Op {
 public:
  explicit FromBlockedOp(std::int64_t channels) : channels_(channels) {
    if (channels < 1) throw ValueError(msg("from_blocked: channels must be >= 1, got ", channels));
  }
  std::string name() const override { return "from_blocked"; }
  std::string params() const override { return msg("channels=", channels_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 1);
    const TensorType& x = in[0];
    detail::check_dtype(name(), "x", x.dtype, {DType::float32, DType::float64});
    if (x.rank() < 3)
      throw ShapeError(msg("from_blocked: x must have rank >= 3 (N, C/block, spatial..., block), got shape ",
                           shape_to_string(x.shape)));
    const std::int64_t block = x.shape.back(), cb = x.shape[1];
    if (block == 0 || block > kMaxBlock)
      throw ShapeError(msg("from_blocked: the block (last axis) of x must be in [1, ", kMaxBlock, "], got shape ",
                           shape_to_string(x.shape)));
    if (block > 0 && cb >= 0 && (channels_ > cb * block || channels_ <= (cb - 1) * block))
      throw ShapeError(msg("from_blocked: channels ", channels_, " do not fit x of shape ", shape_to_string(x.shape),
                           ": ", cb, " blocks of ", block, " hold ", (cb - 1) * block + 1, " to ", cb * block,
                           " channels"));
    TensorType out = x;
    out.shape.pop_back();
    out.shape[1] = channels_;
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    const std::int64_t block = in[0].shape().back();
    if (block < 0)
      throw ShapeError(msg("from_blocked: the gradient needs x's block (last axis) known when the graph is built, got x ",
                           in[0].type().to_string()));
    return {to_blocked(g, block)};
  }
  std::string_view kernel_key() const override { return "from_blocked"; }
  std::int64_t channels() const { return channels_; }

 private:
  std::int64_t channels_;
};

/// Checks that `t` (argument `arg` of `op`) is a float32 blocked activation of block 16
/// with 1 to 3 spatial axes.
void check_blocked(const std::string& op, const char* arg, const TensorType& t) {
  detail::check_dtype(op, arg, t.dtype, {DType::float32});
  if (t.rank() < 4 || t.rank() > 6 || t.shape.back() != detail::kConvBlock)
    throw ShapeError(msg(op, ": ", arg, " must be blocked (N, C/16, spatial..., 16) with 1 to 3 spatial axes, got ",
                         t.to_string()));
}

}  // namespace

Var to_blocked(const Var& x, std::int64_t block) { return apply(std::make_shared<ToBlockedOp>(block), {x}); }
Var from_blocked(const Var& x, std::int64_t channels) {
  return apply(std::make_shared<FromBlockedOp>(channels), {x});
}

namespace detail {

std::int64_t to_blocked_block(const Op& op) { return dynamic_cast<const ToBlockedOp&>(op).block(); }
std::int64_t from_blocked_channels(const Op& op) { return dynamic_cast<const FromBlockedOp&>(op).channels(); }

// ---- the blocked convolution ----------------------------------------------------------

BlockedConvOp::BlockedConvOp(std::shared_ptr<const AbstractConvOp> abstract, std::int64_t channels,
                             Epilogue epilogue, std::string why)
    : abstract_(std::move(abstract)), channels_(channels), epilogue_(epilogue), why_(std::move(why)) {
  if (abstract_->direction() != ConvDirection::forward)
    throw ValueError(msg("BlockedConv: only the forward direction has a blocked form, got ", abstract_->name()));
  if (abstract_->conv_params().groups != 1)
    throw ValueError(msg("BlockedConv: grouped convolutions have no blocked form (num_groups ",
                         abstract_->conv_params().groups, ")"));
  if (channels < 1) throw ValueError(msg("BlockedConv: channels must be >= 1, got ", channels));
}

std::string BlockedConvOp::name() const {
  return std::string("BlockedConv") + (epilogue_.bias ? "+bias" : "") + (epilogue_.residual ? "+residual" : "") +
         (epilogue_.relu ? "+relu" : "");
}

std::string BlockedConvOp::params() const { return msg("block=16,channels=", channels_, ",", abstract_->params()); }

std::string BlockedConvOp::implementation() const {
  return why_.empty() ? "cpu.direct_blocked" : "cpu.direct_blocked (" + why_ + ")";
}

TensorType BlockedConvOp::logical_x(const TensorType& xb) const {
  check_blocked(name(), "x", xb);
  if (xb.shape[1] >= 0 && xb.shape[1] != blocks_of(channels_, kConvBlock))
    throw ShapeError(msg(name(), ": x ", xb.to_string(), " has ", xb.shape[1], " channel blocks, ", channels_,
                         " channels need ", blocks_of(channels_, kConvBlock)));
  TensorType x = xb;
  x.shape.pop_back();
  x.shape[1] = channels_;
  return x;
}

TensorType BlockedConvOp::infer(const std::vector<TensorType>& in) const {
  const std::size_t want = 2 + (epilogue_.bias ? 1 : 0) + (epilogue_.residual ? 1 : 0);
  check_arity(*this, in.size(), want);
  TensorType y = abstract_->infer({logical_x(in[0]), in[1]});
  const std::int64_t k = y.shape[1];
  y.shape[1] = blocks_of(k, kConvBlock);
  y.shape.push_back(kConvBlock);
  if (epilogue_.bias) {
    const TensorType& b = in[2];
    // K contiguous values, as the NCHW epilogue takes them: (K,), (1, K, 1, ...) or (K, 1, ...).
    const std::int64_t n = b.fully_known() ? numel(b.shape) : kUnknown;
    if (b.dtype != y.dtype || !dims_compatible(n, k))
      throw ShapeError(msg(name(), ": bias ", b.to_string(), " must be float32 holding ", k, " values"));
  }
  if (epilogue_.residual) {
    const TensorType& r = in.back();
    bool ok = r.dtype == y.dtype && r.rank() == y.rank();
    for (std::size_t i = 0; ok && i < y.shape.size(); ++i) ok = dims_compatible(r.shape[i], y.shape[i]);
    if (!ok) throw ShapeError(msg(name(), ": residual ", r.to_string(), " must match the output ", y.to_string()));
  }
  return y;
}

ConvProblem BlockedConvOp::problem(const std::vector<TensorType>& in) const {
  return abstract_->problem({logical_x(in[0]), in[1]});
}

std::int64_t blocked_conv_workspace_floats(const ConvProblem& p) {
  const std::int64_t ku = blocks_of(p.K, kConvBlockUnit) * kConvBlockUnit;
  return ku * blocks_of(p.C, kConvBlock) * kConvBlock * p.kernel_numel() + ku;
}

std::size_t BlockedConvOp::workspace_bytes(const std::vector<TensorType>& in) const {
  for (const auto& t : in)
    if (!t.fully_known()) return 0;
  return static_cast<std::size_t>(blocked_conv_workspace_floats(problem(in))) * sizeof(float);
}

// ---- blocked pooling ------------------------------------------------------------------

TensorType BlockedPoolOp::infer(const std::vector<TensorType>& in) const {
  check_arity(*this, in.size(), 1);
  const TensorType& x = in[0];
  check_blocked(name(), "x", x);
  if (x.rank() - 3 < p_.dims)
    throw ShapeError(msg(name(), ": x ", x.to_string(), " has fewer spatial axes than the ", p_.dims,
                         " pooled ones"));
  // The NCHW rule on the logical tensor (N, C, spatial...): the same output lengths.
  TensorType logical = x;
  logical.shape.pop_back();
  TensorType out = p_.output_type(name(), logical);
  out.shape[1] = x.shape[1];
  out.shape.push_back(kConvBlock);
  return out;
}

}  // namespace detail

}  // namespace convgraph
