// Convolution epilogue fusion. A forward convolution followed by a per-channel bias add, a
// residual add and a relu - each optional, in that order - becomes one ConvImplOp that
// applies them to its output as it writes it (ConvEpilogue): the host algorithms do it on
// each block while it is in cache, so the fused ops cost no pass over memory and no buffer.
// On the GPU cuDNN runs it as its fused convolution-bias-activation where that applies
// (backends/cuda/conv_cudnn.cpp), and as cuDNN tensor ops right after the convolution
// otherwise: no separate graph nodes, buffers or launches of ours.
//
// A node joins the chain only when the chain's last node is its only input from the chain,
// that last node has no other client and is not a graph output, and its type is the
// convolution's. Other orders (a residual before the bias) stop the chain, so the fused
// node adds in the same order as the unfused ops and gives the same bits. In a training
// graph the pre-activation has no other reader because relu's gradient reads relu's
// output (ops/elementwise_table.hpp). Runs before elementwise fusion, which would
// otherwise take the adds and the relu into its groups.
//
// Before it, batch_norm_folding folds inference-form batch norm into the convolution it
// follows: BN(conv(x, w)) = conv(x, w * s) + (beta - mean * s), s = gamma / sqrt(var + eps)
// per output channel, so the bias and what follows fuse into the convolution's epilogue.
// The scaled weights and the bias are a few small nodes over the parameters (K * C * k^d
// values) instead of a pass over the activations; results change by rounding only.
//
// After it, a relu that follows a batch norm the folding left (training form, or no
// convolution before it) runs in the batch norm's output pass (batch_norm_train+relu): the
// relu's pass over memory and its buffer go, the values stay the same bits.
#include "convgraph/core/function_graph.hpp"
#include "convgraph/ops/math.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "convgraph/optimizer/conv_impl_op.hpp"
#include "ops/batch_norm_info.hpp"
#include "ops/elementwise_info.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

namespace {

using detail::ElementwiseInfo;

/// b broadcasts as one value per channel onto y (N, K, spatial...): (1, K, 1, ...) or
/// (K, 1, ...) - K contiguous values either way - or (K,) for a 1-D convolution's (N, K, L).
bool per_channel(const TensorType& b, const TensorType& y) {
  const std::int64_t K = y.shape[1];
  if (K < 0 || b.dtype != y.dtype || b.device != y.device) return false;
  const int lead = b.rank() == y.rank() ? 1 : b.rank() == y.rank() - 1 ? 0 : -1;
  if (lead < 0) return false;
  for (int d = 0; d < b.rank(); ++d) {
    const std::int64_t want = d == lead ? K : 1;
    if (b.shape[static_cast<std::size_t>(d)] != want) return false;
  }
  return true;
}


/// The single client of v, or an undefined Var (none, several, or v is an output).
Var only_client(const FunctionGraph& g, const Var& v) {
  const auto cs = g.clients(v);
  if (cs.size() != 1 || is_graph_output(g, v)) return Var();
  return cs[0].first;
}

/// True for bias_add(x, b) (ops/bias_add.cpp): b (K,) added along x's channel axis.
bool is_bias_add(const Op& op) { return op.kernel_key() == "bias_add"; }

bool is_batch_norm_infer(const Op& op) {
  if (op.kernel_key() != "batch_norm") return false;  // the batch-norm forward kernels
  const detail::BnInfo info = detail::bn_info(op);
  return info.kind == detail::BnKind::forward && !info.train;
}

void fold_batch_norms(RewriteContext& ctx) {
  FunctionGraph& graph = ctx.graph;
  for (const Var& bn : graph.toposort()) {
    if (!bn.op() || !is_batch_norm_infer(*bn.op()) || bn.inputs().size() != 5) continue;
    const Var& z = bn.inputs()[0];
    const ConvImplOp* conv = as_conv_impl(z);
    if (!conv || conv->direction() != ConvDirection::forward || !conv->epilogue().empty()) continue;
    const TensorType& y = z.type();
    if (y.device != DeviceKind::cpu || (y.dtype != DType::float32 && y.dtype != DType::float64) || y.shape[1] < 0)
      continue;
    if (!only_client(graph, z).same(bn)) continue;  // the raw convolution is needed elsewhere
    const double eps = detail::bn_info(*bn.op()).eps;
    const Var &gamma = bn.inputs()[1], &beta = bn.inputs()[2], &mean = bn.inputs()[3], &var = bn.inputs()[4];
    const Var s = gamma / sqrt(var + eps);
    Shape w_axes(static_cast<std::size_t>(y.rank()), 1), b_axes(static_cast<std::size_t>(y.rank()), 1);
    w_axes[0] = y.shape[1];
    b_axes[1] = y.shape[1];
    const Var w = z.inputs()[1] * reshape(s, w_axes);
    const Var folded = apply(z.node()->op, {z.inputs()[0], w}, z.name()) + reshape(beta - mean * s, b_axes);
    graph.replace(bn, folded, ctx.current);
  }
}

void fuse_batch_norm_relus(RewriteContext& ctx) {
  FunctionGraph& graph = ctx.graph;
  for (const Var& bn : graph.toposort()) {
    if (!bn.op() || bn.op()->kernel_key() != "batch_norm") continue;  // the forward kernels
    detail::BnInfo info = detail::bn_info(*bn.op());
    if (info.relu || bn.type().device != DeviceKind::cpu) continue;
    const Var r = only_client(graph, bn);
    if (!r.defined() || !r.op() || !(r.type() == bn.type())) continue;
    const ElementwiseInfo e = detail::elementwise_info(*r.op());
    if (e.cls != ElementwiseInfo::Class::unary || e.unary != detail::UnaryKind::relu) continue;
    info.relu = true;
    graph.replace(r, detail::batch_norm_forward(info, bn.inputs()), ctx.current);
  }
}

void fuse_conv_epilogues(RewriteContext& ctx) {
  FunctionGraph& graph = ctx.graph;
  for (const Var& conv_node : graph.toposort()) {
    const ConvImplOp* conv = as_conv_impl(conv_node);
    if (!conv || conv->direction() != ConvDirection::forward || !conv->epilogue().empty()) continue;
    const TensorType& y = conv_node.type();
    const bool on_device = y.device == DeviceKind::cpu || y.device == DeviceKind::cuda;
    if (!on_device || (y.dtype != DType::float32 && y.dtype != DType::float64) || y.rank() < 3) continue;
    if (!conv->has_device_kernel(y.device, {})) continue;
    ConvEpilogueSpec spec;
    Var bias, residual, last = conv_node;
    enum { kConv, kBias, kResidual } stage = kConv;
    for (Var next = only_client(graph, last); next.defined() && next.op() && next.type() == y;
         next = only_client(graph, last)) {
      const ElementwiseInfo info = detail::elementwise_info(*next.op());
      if (info.cls == ElementwiseInfo::Class::unary && info.unary == detail::UnaryKind::relu) {
        spec.activation = ConvActivation::relu;
        last = next;
        break;  // nothing fuses after the activation
      }
      if (stage == kConv && is_bias_add(*next.op()) && next.inputs()[0].same(last)) {
        spec.bias = true;
        bias = next.inputs()[1];
        stage = kBias;
        last = next;
        continue;
      }
      if (info.cls != ElementwiseInfo::Class::binary || info.binary != detail::BinaryKind::add) break;
      const Var& other = next.inputs()[0].same(last) ? next.inputs()[1] : next.inputs()[0];
      if (stage == kConv && per_channel(other.type(), y)) {
        spec.bias = true;
        bias = other;
        stage = kBias;
      } else if (stage != kResidual && other.type() == y && y.fully_known()) {
        spec.residual = true;
        residual = other;
        stage = kResidual;
      } else {
        break;
      }
      last = next;
    }
    if (spec.empty()) continue;
    std::vector<Var> inputs{conv_node.inputs()[0], conv_node.inputs()[1]};
    if (spec.bias) inputs.push_back(bias);
    if (spec.residual) inputs.push_back(residual);
    Var fused = apply(conv->with_epilogue(spec), inputs, last.name().empty() ? conv_node.name() : last.name());
    graph.replace(last, fused, ctx.current);
  }
}

}  // namespace

void register_conv_epilogue_fusion(RewriteDB& db) {
  // Before elemwise_fusion (position 0) in the same phase; batch norm folds first.
  db.add_global("fusion", "batch_norm_folding", {"fast_run", "conv_fusion"}, -2, fold_batch_norms);
  db.add_global("fusion", "conv_epilogue_fusion", {"fast_run", "conv_fusion"}, -1, fuse_conv_epilogues);
  db.add_global("fusion", "batch_norm_relu_fusion", {"fast_run", "conv_fusion"}, -1.5, fuse_batch_norm_relus);
}

}  // namespace convgraph
