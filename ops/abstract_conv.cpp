#include "convgraph/ops/abstract_conv.hpp"

#include <memory>
#include <sstream>

#include "convgraph/core/error.hpp"
#include "core/checked_math.hpp"

namespace convgraph {

namespace {

constexpr bool known(std::int64_t v) { return v >= 0; }

// Operand names per direction, as the user-facing functions call them.
struct OperandNames {
  const char* first;
  const char* second;
};
OperandNames operand_names(ConvDirection d) {
  switch (d) {
    case ConvDirection::forward: return {"input", "filters"};
    case ConvDirection::grad_inputs: return {"filters", "output_grad"};
    case ConvDirection::grad_weights: return {"input", "output_grad"};
  }
  return {"?", "?"};
}

// The forward geometry of a node: x (N, C, in...), w (K, C/G, k...), y (N, K, out...),
// each dim known or kUnknown. infer() fills it from the operands and the target shape,
// then checks every relation that the known dims allow.
struct Geometry {
  Shape x, w, y;
};

// Merges two sources of one dimension (target shape, shape-source operand, value derived
// from the other operands); conflicting known values are a ShapeError.
std::int64_t merge_dim(std::int64_t a, std::int64_t b, const std::string& who, const char* what,
                       std::size_t axis, const Shape& sa, const Shape& sb) {
  if (!known(a)) return b;
  if (known(b) && a != b)
    throw ShapeError(msg(who, ": ", what, " dim[", axis, "] is ", a, " in ", shape_to_string(sa),
                         " but ", b, " in ", shape_to_string(sb)));
  return a;
}

// A grad node derives its result's spatial sizes from the other two operands; a size below
// 1 means no input (filter) gives this output_grad: say so with the values, rather than
// letting it pass as "unknown" and be reported as ambiguous.
void check_derived_size(ConvDirection direction_, const ConvParams& params_, const std::string& me, std::size_t a,
                        const Geometry& g, std::int64_t derived) {
  const auto ai = static_cast<int>(a);
  const std::int64_t d = params_.dilation[a];
  if (direction_ == ConvDirection::grad_inputs) {
    // get_conv_gradinputs_shape_1axis says kUnknown (-1) when it cannot tell, but -1 is
    // also a real (invalid) size: decide from the operands.
    if (!known(g.w[a + 2]) || !known(g.y[a + 2]) || params_.stride[a] != 1 || derived >= 1) return;
    const std::int64_t dk = (g.w[a + 2] - 1) * d + 1;  // the helper computed it, so it did not overflow
    const auto [p0, p1] = params_.border.axis_pads(ai, dk);
    if (!known(p0) || !known(p1)) return;
    throw ShapeError(msg(me, ": the input size of spatial axis ", a, " would be ", derived,
                         " (below 1): output_grad size ", g.y[a + 2], " + dilated kernel ", dk, " - 1 - padding ",
                         p0, "+", p1, " (filters ", shape_to_string(g.w), ", output_grad ", shape_to_string(g.y), ", ",
                         params_.to_string(), ")"));
  }
  if (known(derived) || !known(g.x[a + 2]) || !known(g.y[a + 2]) || params_.stride[a] != 1 ||
      params_.border.kind == BorderKind::half)
    return;  // really ambiguous (or not yet known)
  std::int64_t span;  // dilated kernel extent minus one
  std::string how;
  if (params_.border.kind == BorderKind::full) {
    span = g.y[a + 2] - g.x[a + 2];
    how = msg("output_grad size ", g.y[a + 2], " - input size ", g.x[a + 2]);
  } else {
    const auto [p0, p1] = params_.border.axis_pads(ai, 0);
    span = detail::checked_sub(detail::checked_add(detail::checked_add(g.x[a + 2], p0, me, "input size + padding"), p1,
                                                   me, "input size + padding"),
                               g.y[a + 2], me, "input size + padding - output_grad size");
    how = msg("input size ", g.x[a + 2], " + padding ", p0, "+", p1, " - output_grad size ", g.y[a + 2]);
  }
  if (span < 0)
    throw ShapeError(msg(me, ": the filter size of spatial axis ", a, " would be ", detail::floor_div(span, d) + 1,
                         " (below 1): ", how, " = ", span, " is negative (input ", shape_to_string(g.x),
                         ", output_grad ", shape_to_string(g.y), ", ", params_.to_string(), ")"));
  if (span % d != 0)
    throw ShapeError(msg(me, ": no filter size fits spatial axis ", a, ": ", how, " = ", span,
                         " is not a multiple of filter_dilation ", d, " (input ", shape_to_string(g.x),
                         ", output_grad ", shape_to_string(g.y), ", ", params_.to_string(), ")"));
}

}  // namespace

std::string AbstractConvOp::op_name(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::forward: return "AbstractConv";
    case ConvDirection::grad_inputs: return "AbstractConvGradInputs";
    case ConvDirection::grad_weights: return "AbstractConvGradWeights";
  }
  return "AbstractConv?";
}

AbstractConvOp::AbstractConvOp(ConvDirection direction, ConvParams params, Shape target_shape)
    : direction_(direction), target_(std::move(target_shape)) {
  const std::string who =
      params.name.empty() ? op_name(direction) : op_name(direction) + " '" + params.name + "'";
  params_ = params.normalized(who);
  const auto rank = static_cast<std::size_t>(params_.ndim + 2);
  if (direction_ == ConvDirection::forward) {
    if (!target_.empty())
      throw ValueError(msg(who, ": a forward convolution takes no target shape, got ",
                           shape_to_string(target_)));
    return;
  }
  const char* what = direction_ == ConvDirection::grad_inputs ? "input_shape" : "filter_shape";
  if (target_.empty()) target_.assign(rank, kUnknown);
  if (target_.size() != rank)
    throw ValueError(msg(who, ": ", what, " ", shape_to_string(target_), " must have ", rank,
                         " entries (", params_.ndim, " spatial dims + 2), got ", target_.size()));
  for (std::size_t i = 0; i < rank; ++i) {
    if (target_[i] < kUnknown)
      throw ValueError(msg(who, ": ", what, " ", shape_to_string(target_), " has a negative entry ",
                           target_[i], " at dim ", i, " (use -1 for unknown)"));
    if (i >= 2 && target_[i] == 0)
      throw ValueError(msg(who, ": ", what, " ", shape_to_string(target_), " has a zero spatial size at dim ", i));
  }
}

std::string AbstractConvOp::who() const {
  return params_.name.empty() ? op_name(direction_) : op_name(direction_) + " '" + params_.name + "'";
}

std::string AbstractConvOp::name() const { return op_name(direction_); }

std::string AbstractConvOp::params() const {
  // The user's name is deliberately left out: two nodes computing the same thing merge.
  std::string p = params_.to_string();
  if (direction_ == ConvDirection::grad_inputs) p += " input_shape=" + shape_to_string(target_);
  if (direction_ == ConvDirection::grad_weights) p += " filter_shape=" + shape_to_string(target_);
  return p;
}

namespace {

// The pieces of AbstractConvOp::infer, in order. `me` names the node in messages.

// Operand count, dtypes, ranks and devices; returns the shape source (all kUnknown when
// there is none).
Shape check_operands(ConvDirection dir, const ConvParams& params, const std::string& me,
                     const std::vector<TensorType>& inputs) {
  const bool fwd = dir == ConvDirection::forward;
  if (inputs.size() < 2 || inputs.size() > (fwd ? 2u : 3u))
    throw ValueError(msg(me, ": expects ", fwd ? "2 operands (input, filters)" :
                         dir == ConvDirection::grad_inputs
                             ? "2 operands (filters, output_grad) and an optional shape source"
                             : "2 operands (input, output_grad) and an optional shape source",
                         ", got ", inputs.size()));
  const auto names = operand_names(dir);
  const int rank = params.ndim + 2;
  const char* arg_names[2] = {names.first, names.second};
  for (int i = 0; i < 2; ++i) {
    const TensorType& t = inputs[static_cast<std::size_t>(i)];
    if (!is_float(t.dtype))
      throw TypeError(msg(me, ": argument '", arg_names[i], "' has dtype ", dtype_name(t.dtype),
                          "; convolutions need float16, bfloat16, float32 or float64"));
    if (t.rank() != rank)
      throw ShapeError(msg(me, ": argument '", arg_names[i], "' must have rank ", rank,
                           " (2 + ", params.ndim, " spatial dims), got ", t.to_string()));
  }
  if (inputs[0].dtype != inputs[1].dtype)
    throw TypeError(msg(me, ": dtype mismatch: '", names.first, "' is ", dtype_name(inputs[0].dtype),
                        " but '", names.second, "' is ", dtype_name(inputs[1].dtype)));
  if (inputs[0].device != inputs[1].device)
    throw TypeError(msg(me, ": device mismatch: '", names.first, "' is ", inputs[0].to_string(), " but '",
                        names.second, "' is ", inputs[1].to_string()));
  if (inputs.size() < 3) return Shape(static_cast<std::size_t>(rank), kUnknown);
  if (inputs[2].rank() != rank)
    throw ShapeError(msg(me, ": the shape source must have rank ", rank, ", got ", inputs[2].to_string()));
  return inputs[2].shape;
}

const char* target_name(ConvDirection dir) {
  return dir == ConvDirection::grad_inputs ? "input_shape" : "filter_shape";
}

// A grad node's result (x for grad_inputs, w for grad_weights): the target hint, then the
// shape source, then what the other two operands determine (Theano's
// get_conv_grad*_shape: unknown if ambiguous). Fills it into g.
void complete_grad_target(ConvDirection dir, const ConvParams& params, const Shape& target, const Shape& source,
                          const std::string& me, const std::vector<TensorType>& inputs, Geometry& g) {
  const auto names = operand_names(dir);
  const char* tname = target_name(dir);
  const std::int64_t G = params.groups;
  const auto nd = static_cast<std::size_t>(params.ndim);
  Shape t(target.size());
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = merge_dim(target[i], source[i], me, tname, i, target, source);
  Shape derived;
  try {
    if (dir == ConvDirection::grad_inputs) {
      derived = {g.y[0], known(g.w[1]) ? detail::checked_mul(g.w[1], G, me, "filter channels * num_groups") : kUnknown};
      for (std::size_t a = 0; a < nd; ++a)
        derived.push_back(get_conv_gradinputs_shape_1axis(g.w[a + 2], g.y[a + 2], params.border, static_cast<int>(a),
                                                          params.stride[a], params.dilation[a]));
    } else {
      derived = {g.y[1], known(g.x[1]) && g.x[1] % G == 0 ? g.x[1] / G : kUnknown};
      for (std::size_t a = 0; a < nd; ++a)
        derived.push_back(get_conv_gradweights_shape_1axis(g.x[a + 2], g.y[a + 2], params.border, static_cast<int>(a),
                                                           params.stride[a], params.dilation[a]));
    }
  } catch (const ShapeError& e) {  // an overflow in the shape helpers: name this op too
    if (std::string_view(e.what()).starts_with(me)) throw;
    throw ShapeError(msg(me, ": ", e.what(), " (", names.first, " ", shape_to_string(inputs[0].shape), ", ",
                         names.second, " ", shape_to_string(inputs[1].shape), ", ", params.to_string(), ")"));
  }
  // Only batch/channel dims are checked here; spatial ones are checked later against the
  // forward formula, with a message that shows the whole geometry.
  for (std::size_t i = 0; i < 2; ++i) {
    if (known(t[i]) && known(derived[i]) && t[i] != derived[i]) {
      const char* dim = dir == ConvDirection::grad_inputs
                            ? (i == 0 ? "batch size (output_grad dim 0)" : "channels (filters dim 1 x num_groups)")
                            : (i == 0 ? "filter count (output_grad dim 1)" : "channels per group (input dim 1 / num_groups)");
      throw ShapeError(msg(me, ": ", tname, " ", shape_to_string(t), " has ", t[i], " at dim ", i, " but the ", dim,
                           " is ", derived[i], " (", names.first, " ", shape_to_string(inputs[0].shape), ", ",
                           names.second, " ", shape_to_string(inputs[1].shape), ", num_groups ", G, ")"));
    }
  }
  for (std::size_t a = 0; a < nd; ++a)
    if (!known(t[a + 2])) check_derived_size(dir, params, me, a, g, derived[a + 2]);
  for (std::size_t i = 0; i < t.size(); ++i)
    if (!known(t[i])) t[i] = derived[i];
  (dir == ConvDirection::grad_inputs ? g.x : g.w) = t;
}

// The forward output y (N, K, out...) of g.x and g.w; for a grad node, checked against
// (and completed from) the given output_grad g.y.
Shape forward_output(ConvDirection dir, const ConvParams& params, const std::string& me, const Geometry& g) {
  Shape y{g.x[0], g.w[0]};
  for (int a = 0; a < params.ndim; ++a) y.push_back(conv_output_axis(params, a, g.x, g.w, me));
  if (dir == ConvDirection::forward) return y;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (known(y[i]) && known(g.y[i]) && y[i] != g.y[i])
      throw ShapeError(msg(me, ": invalid ", target_name(dir), ": input ", shape_to_string(g.x), " and filters ",
                           shape_to_string(g.w), " would produce an output of shape ", shape_to_string(y),
                           ", but output_grad has shape ", shape_to_string(g.y), " (", params.to_string(), ")"));
    if (!known(y[i])) y[i] = g.y[i];
  }
  return y;
}

}  // namespace

TensorType AbstractConvOp::infer(const std::vector<TensorType>& inputs) const {
  const std::string me = who();
  const Shape source = check_operands(direction_, params_, me, inputs);
  // The forward geometry: two of x, w, y are operands, a grad node derives the third.
  Geometry g;
  switch (direction_) {
    case ConvDirection::forward: g = {inputs[0].shape, inputs[1].shape, {}}; break;
    case ConvDirection::grad_inputs: g = {{}, inputs[0].shape, inputs[1].shape}; break;
    case ConvDirection::grad_weights: g = {inputs[0].shape, {}, inputs[1].shape}; break;
  }
  if (direction_ != ConvDirection::forward) complete_grad_target(direction_, params_, target_, source, me, inputs, g);
  check_conv_channels(g.x, g.w, params_.groups, me);
  const Shape y = forward_output(direction_, params_, me, g);

  TensorType out{inputs[0].dtype, {}, inputs[0].device};
  switch (direction_) {
    case ConvDirection::forward: out.shape = y; break;
    case ConvDirection::grad_inputs: out.shape = g.x; break;
    case ConvDirection::grad_weights: out.shape = g.w; break;
  }
  bool inputs_known = true;
  for (const auto& t : inputs) inputs_known = inputs_known && t.fully_known();
  if (inputs_known && !out.fully_known()) {
    const auto names = operand_names(direction_);
    const char* tname = target_name(direction_);
    throw ShapeError(msg(me, ": the ", tname, " is ambiguous: ", shape_to_string(out.shape), " from ", names.first, " ",
                         shape_to_string(inputs[0].shape), " and ", names.second, " ",
                         shape_to_string(inputs[1].shape), " with ", params_.to_string(),
                         "; several shapes give the same output (stride > 1 or 'half' padding): pass the full ",
                         tname));
  }
  return out;
}

ConvProblem AbstractConvOp::problem(const std::vector<TensorType>& inputs) const {
  const TensorType out = infer(inputs);
  const Shape* x = nullptr;
  const Shape* w = nullptr;
  switch (direction_) {
    case ConvDirection::forward: x = &inputs[0].shape; w = &inputs[1].shape; break;
    case ConvDirection::grad_inputs: x = &out.shape; w = &inputs[0].shape; break;
    case ConvDirection::grad_weights: x = &inputs[0].shape; w = &out.shape; break;
  }
  return ConvProblem::make(direction_, params_, *x, *w, inputs[0].dtype, who());
}

double AbstractConvOp::flops(const std::vector<TensorType>& inputs) const { return problem(inputs).flops(); }

std::vector<Var> AbstractConvOp::grad(const std::vector<Var>& inputs, const Var& output,
                                      const Var& output_grad) const {
  (void)output;
  const std::string base = params_.name;
  auto node_name = [&](const char* suffix) { return base.empty() ? std::string() : base + suffix; };
  // A grad node rebuilds an operand of this node: its target is that operand's static
  // shape, and the operand itself rides along as shape source when that is incomplete.
  auto grad_node = [&](ConvDirection dir, const Var& a, const Var& b, const Var& like, const char* suffix) {
    std::vector<Var> args{a, b};
    if (!like.type().fully_known()) args.push_back(like);
    return apply(std::make_shared<AbstractConvOp>(dir, params_, like.shape()), std::move(args), node_name(suffix));
  };
  auto forward = [&](const Var& x, const Var& w, const char* suffix) {
    return apply(std::make_shared<AbstractConvOp>(ConvDirection::forward, params_), {x, w}, node_name(suffix));
  };
  const Var& g = output_grad;
  switch (direction_) {
    case ConvDirection::forward: {
      const Var& x = inputs[0];
      const Var& w = inputs[1];
      return {grad_node(ConvDirection::grad_inputs, w, g, x, ".grad_inputs"),
              grad_node(ConvDirection::grad_weights, x, g, w, ".grad_weights")};
    }
    case ConvDirection::grad_inputs: {
      // dx = GI(w, dy): linear in w and in dy; the adjoints are GW and the forward op.
      const Var& w = inputs[0];
      const Var& dy = inputs[1];
      std::vector<Var> out{grad_node(ConvDirection::grad_weights, g, dy, w, ".grad_weights"),
                           forward(g, w, ".forward")};
      if (inputs.size() == 3) out.emplace_back();  // the shape source carries no gradient
      return out;
    }
    case ConvDirection::grad_weights: {
      const Var& x = inputs[0];
      const Var& dy = inputs[1];
      std::vector<Var> out{grad_node(ConvDirection::grad_inputs, g, dy, x, ".grad_inputs"),
                           forward(x, g, ".forward")};
      if (inputs.size() == 3) out.emplace_back();
      return out;
    }
  }
  return {};
}

const AbstractConvOp* as_abstract_conv(const Var& v) {
  return v.defined() ? dynamic_cast<const AbstractConvOp*>(v.op()) : nullptr;
}

}  // namespace convgraph
