// ConvImplOp: the lowered convolution node, its run-time algorithm choice and the
// DebugMode cross-check against the reference.
#include "convgraph/optimizer/conv_impl_op.hpp"
#include "convgraph/optimizer/conv_lowering.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "convgraph/backends/cpu/reference.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "backends/cpu/conv_epilogue.hpp"
#include "backends/cuda/conv_cuda.hpp"
#include "backends/device_buffers.hpp"
#include "optimizer/text_util.hpp"

namespace convgraph {

namespace {

std::vector<std::int64_t> written_shape(const ConvProblem& p) {
  switch (p.direction) {
    case ConvDirection::forward: return p.y_shape();
    case ConvDirection::grad_inputs: return p.x_shape();
    case ConvDirection::grad_weights: return p.w_shape();
  }
  return {};
}

/// NaN and infinities must sit where the reference has them (NaN for NaN, +inf for +inf,
/// -inf for -inf); elsewhere both are finite and differ by at most the tolerance,
/// relative to the largest finite |reference|. The first special-value mismatch is
/// reported at once.
template <class T>
ConvCheck compare_typed(const T* got, const T* want, std::int64_t n, double rel) {
  ConvCheck c;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isfinite(want[i])) c.scale = std::max(c.scale, std::abs(static_cast<double>(want[i])));
  c.tolerance = rel * std::max(c.scale, 1e-12);
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const bool same_special = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : std::isfinite(g);
    if (!same_special) {
      c.special = true;
      c.max_error = NAN;
      c.index = i;
      c.got = g;
      c.want = w;
      c.ok = false;
      return c;
    }
    if (!std::isfinite(w)) continue;  // matching NaN / inf
    const double e = std::abs(g - w);
    if (e > c.max_error || c.index < 0) {
      c.max_error = e;
      c.index = i;
      c.got = g;
      c.want = w;
    }
  }
  c.ok = c.max_error <= c.tolerance;
  return c;
}

/// A host copy in a dtype the reference computes in (16-bit floats become float64).
Tensor for_reference(const Tensor& t) {
  Tensor h = copy_to_host(t);
  if (h.dtype() == DType::float32 || h.dtype() == DType::float64) return h;
  return h.astype(DType::float64);
}

/// A host snapshot that later writes to `t` cannot change.
Tensor snapshot(const Tensor& t) { return t.device() == DeviceKind::cpu ? t.clone() : copy_to_host(t); }

}  // namespace

// ---- helpers shared with the meta-optimizer -------------------------------------------

ConvTensors conv_tensors(ConvDirection d, const void* in0, const void* in1, void* out) {
  auto* a = const_cast<void*>(in0);
  auto* b = const_cast<void*>(in1);
  switch (d) {
    case ConvDirection::forward: return ConvTensors{a, b, out, {}};       // (x, w) -> y
    case ConvDirection::grad_inputs: return ConvTensors{out, a, b, {}};   // (w, dy) -> dx
    case ConvDirection::grad_weights: return ConvTensors{a, out, b, {}};  // (x, dy) -> dw
  }
  return {};
}

double conv_relative_tolerance(DType dtype) {
  switch (dtype) {
    case DType::float64: return 1e-9;
    case DType::float32: return 1e-3;
    default: return 1e-2;
  }
}

ConvCheck compare_conv_results(const void* got, const void* want, std::int64_t n, DType dtype) {
  const double rel = conv_relative_tolerance(dtype);
  if (dtype == DType::float32)
    return compare_typed(static_cast<const float*>(got), static_cast<const float*>(want), n, rel);
  if (dtype == DType::float64)
    return compare_typed(static_cast<const double*>(got), static_cast<const double*>(want), n, rel);
  throw TypeError(msg("compare_conv_results: dtype ", dtype_name(dtype), " is not float32 or float64"));
}

std::string ConvCheck::to_string() const {
  std::ostringstream os;
  os.precision(6);
  if (special) {
    os << "NaN/inf mismatch at element " << index << " (got " << got << ", reference " << want
       << "): NaN and infinities must be where the reference has them";
    return os.str();
  }
  os << "largest error " << max_error << " at element " << index << " (got " << got << ", reference "
     << want << "); tolerance " << tolerance << " (relative to max |reference| " << scale << ")";
  return os.str();
}

// ---- ConvImplOp ---------------------------------------------------------------------

std::string ConvEpilogueSpec::text() const {
  std::string s;
  if (bias) s += "+bias";
  if (residual) s += "+residual";
  if (activation == ConvActivation::relu) s += "+relu";
  return s;
}

std::shared_ptr<const ConvImplOp> ConvImplOp::with_epilogue(ConvEpilogueSpec epilogue) const {
  if (direction() != ConvDirection::forward)
    throw ValueError(msg(label(), ": only a forward convolution takes an epilogue (", epilogue.text(), ")"));
  auto op = fixed_ ? std::make_shared<ConvImplOp>(abstract_, fixed_, why_, options_)
                   : std::make_shared<ConvImplOp>(abstract_, candidates_, why_, options_);
  op->epilogue_ = epilogue;
  return op;
}

std::size_t ConvImplOp::epilogue_inputs() const {
  return static_cast<std::size_t>(epilogue_.bias) + static_cast<std::size_t>(epilogue_.residual);
}

std::vector<TensorType> ConvImplOp::operands(const std::vector<TensorType>& inputs) const {
  const std::size_t extra = epilogue_inputs();
  if (extra == 0) return inputs;
  if (inputs.size() != 2 + extra)
    throw TypeError(msg(label(), ": expects x, w and ", extra, " epilogue input(s) (", epilogue_.text(), "), got ",
                        inputs.size(), " inputs"));
  return {inputs[0], inputs[1]};
}

ConvImplOp::ConvImplOp(std::shared_ptr<const AbstractConvOp> abstract, AlgorithmPtr algorithm,
                       std::string why, Options options)
    : abstract_(std::move(abstract)), fixed_(std::move(algorithm)), why_(std::move(why)),
      options_(std::move(options)) {
  if (!abstract_ || !fixed_) throw ValueError("ConvImplOp: null abstract op or algorithm");
}

ConvImplOp::ConvImplOp(std::shared_ptr<const AbstractConvOp> abstract, std::vector<AlgorithmPtr> candidates,
                       std::string why, Options options)
    : abstract_(std::move(abstract)), candidates_(std::move(candidates)), why_(std::move(why)),
      options_(std::move(options)) {
  if (!abstract_ || candidates_.empty())
    throw ValueError("ConvImplOp: a run-time choice needs an abstract op and at least one candidate");
}

std::string ConvImplOp::name() const {
  switch (direction()) {
    case ConvDirection::forward: return "Conv" + epilogue_.text();
    case ConvDirection::grad_inputs: return "ConvGradInputs";
    case ConvDirection::grad_weights: return "ConvGradWeights";
  }
  return "Conv";
}

std::string ConvImplOp::params() const {
  std::string algo;
  if (fixed_) {
    algo = fixed_->name();
  } else {
    std::vector<std::string> names;
    for (const auto& c : candidates_) names.push_back(c->name());
    algo = "auto[" + join_text(names, ",") + "]";
  }
  std::string p = "algo=" + algo + " " + abstract_->params();
  if (options_.debug_check) p += " debug";
  if (!epilogue_.empty()) p += " epilogue=" + epilogue_.text();
  return p;
}

std::vector<std::string> ConvImplOp::tags() const { return fixed_ ? fixed_->tags() : std::vector<std::string>{}; }

TensorType ConvImplOp::infer(const std::vector<TensorType>& inputs) const {
  TensorType t = abstract_->infer(operands(inputs));
  t.device = fixed_ ? fixed_->device() : (inputs.empty() ? DeviceKind::cpu : inputs[0].device);
  std::size_t next = 2;
  if (epilogue_.bias) {
    // Any shape holding K values in a row: (K,), (1, K, 1, 1), (K, 1, 1), ...
    const TensorType& b = inputs[next++];
    const std::int64_t K = t.shape.size() > 1 ? t.shape[1] : kUnknown;
    int long_axes = 0;
    bool ok = b.dtype == t.dtype && b.rank() >= 1;
    for (const std::int64_t d : b.shape)
      if (d != 1) ok = ok && ++long_axes == 1 && (d == K || d < 0 || K < 0);
    if (!ok || (long_axes == 0 && K != 1 && K >= 0))
      throw ShapeError(msg(label(), ": the bias must hold ", K, " ", dtype_name(t.dtype),
                           " values, one per output channel, got ", b.to_string()));
  }
  if (epilogue_.residual) {
    const TensorType& r = inputs[next++];
    bool ok = r.dtype == t.dtype && r.rank() == t.rank();
    for (int d = 0; ok && d < r.rank(); ++d) {
      const auto i = static_cast<std::size_t>(d);
      ok = r.shape[i] < 0 || t.shape[i] < 0 || r.shape[i] == t.shape[i];
    }
    if (!ok)
      throw ShapeError(msg(label(), ": the residual must have the output's type ", t.to_string(), ", got ", r.to_string()));
  }
  return t;
}

ConvProblem ConvImplOp::problem(const std::vector<TensorType>& inputs) const {
  ConvProblem p = abstract_->problem(operands(inputs));
  p.workspace_limit = options_.workspace_limit;
  return p;
}

const ConvAlgorithm& ConvImplOp::select(const ConvProblem& p) const {
  const std::string& who = options_.node_label.empty() ? label() : options_.node_label;
  if (fixed_) {
    if (Status s = fixed_->applicable(p); !s)
      throw RuntimeError(msg(who, ": algorithm ", fixed_->name(), " chosen at compile time cannot run ",
                             p.key(), ": ", s.reason()));
    return *fixed_;
  }
  const std::string key = p.key();
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = chosen_.find(key); it != chosen_.end()) return *it->second.algorithm;
  if (options_.tune) {
    std::string why;
    if (AlgorithmPtr a = options_.tune(p, why)) return *chosen_.emplace(key, Choice{std::move(a), why}).first->second.algorithm;
  }
  std::vector<std::string> reasons;
  std::vector<AlgorithmPtr> usable;
  for (const auto& c : candidates_) {
    Status s = c->applicable(p);
    if (s && c->workspace_bytes(p) > p.workspace_limit)
      s = Status::no(msg("workspace ", bytes_text_iec(static_cast<double>(c->workspace_bytes(p))),
                         " exceeds workspace_limit ", p.workspace_limit, " bytes"));
    if (s) {
      usable.push_back(c);
      if (!options_.cost_model) break;  // priority: the first applicable one
    } else {
      reasons.push_back(c->name() + ": " + s.reason());
    }
  }
  if (!usable.empty()) {
    std::string why;
    AlgorithmPtr pick = options_.cost_model ? cheapest_algorithm(usable, p, *options_.cost_model, &why) : usable.front();
    return *chosen_.emplace(key, Choice{std::move(pick), std::move(why)}).first->second.algorithm;
  }
  throw RuntimeError(msg(who, ": no candidate algorithm applies to ", key, ":\n  ", join_text(reasons, "\n  ")));
}

std::size_t ConvImplOp::workspace_bytes(const std::vector<TensorType>& inputs) const {
  for (const auto& t : inputs)
    if (!t.fully_known()) return 0;  // planned per call once shapes are concrete
  try {
    const ConvProblem p = problem(inputs);
    return select(p).workspace_bytes(p);
  } catch (const DeviceContextError&) {
    throw;
  } catch (const Error&) {
    return 0;  // perform() reports the problem with the real arguments
  }
}

void ConvImplOp::perform(const std::vector<Tensor>& inputs, Tensor& output, const ExecContext& ctx) const {
  const std::string& who = options_.node_label.empty() ? label() : options_.node_label;
  // Inputs 0 and 1 are the operands; a grad op's optional input 2 only lends its shape; a
  // fused forward convolution's epilogue inputs (bias, residual) follow the operands.
  const std::size_t extra = epilogue_inputs();
  if (extra > 0 ? inputs.size() != 2 + extra : inputs.size() < 2 || inputs.size() > 3)
    throw RuntimeError(msg(who, ": expects 2 operands and ",
                           extra > 0 ? msg(extra, " epilogue input(s)") : std::string("an optional shape source"),
                           ", got ", inputs.size(), " inputs"));
  std::vector<TensorType> types;
  for (const auto& t : inputs) types.push_back(TensorType{t.dtype(), t.shape(), t.device()});
  const ConvEpilogue epilogue = epilogue_.empty() ? ConvEpilogue{}
      : ConvEpilogue{epilogue_.bias ? inputs[2].raw() : nullptr, epilogue_.residual ? inputs[1 + extra].raw() : nullptr,
                     epilogue_.activation};
  // Theano's zero-size policy: an empty batch or no filters give an empty output; no
  // input channels (or an empty reduction) give zeros. No algorithm sees such problems.
  if (inputs[0].numel() == 0 || inputs[1].numel() == 0 || output.numel() == 0) {
    if (output.numel() == 0) return;
    if (output.device() != DeviceKind::cpu)
      throw ShapeError(msg(who, ": zero-size operands on ", device_name(output.device()), " are not supported"));
    std::memset(output.raw(), 0, output.nbytes());
    if (!epilogue_.empty()) {  // zeros, then the epilogue: only the output's shape matters here
      ConvProblem z;
      z.ndim = output.rank() - 2;
      z.N = output.shape()[0];
      z.K = output.shape()[1];
      for (int a = 0; a < z.ndim; ++a) z.out[static_cast<std::size_t>(a)] = output.shape()[static_cast<std::size_t>(a) + 2];
      z.dtype = output.dtype();
      apply_conv_epilogue(z, ConvTensors{nullptr, nullptr, output.raw(), epilogue}, ctx);
    }
    return;
  }
  const ConvProblem p = problem(types);
  const ConvAlgorithm& algo = select(p);
  if (output.shape() != written_shape(p) || output.dtype() != p.dtype)
    throw ShapeError(msg(who, ": output buffer ", dtype_name(output.dtype()), shape_to_string(output.shape()),
                         " does not match the problem's ", dtype_name(p.dtype), shape_to_string(written_shape(p))));

  // A kernel must never dereference another device's memory: the operands, the epilogue's
  // inputs and the output live on the algorithm's device (a shape source may not).
  for (std::size_t i = 0; i <= 2 + extra; ++i) {
    const Tensor& t = i < 2 + extra ? inputs[i] : output;
    if (t.device() != algo.device())
      throw DeviceError(msg(who, ": algorithm ", algo.name(), " runs on ", device_name(algo.device()),
                            " but was handed a ", device_name(t.device()), " tensor",
                            i < 2 + extra ? msg(" as input ", i) : std::string(" as output")));
  }
  const std::size_t need = algo.workspace_bytes(p);
  ConvContext cc{ctx.pool ? ctx.pool : &ThreadPool::default_pool(), ctx.workspace, ctx.workspace_bytes, ctx.stream};
  std::shared_ptr<Storage> scratch;
  if (need > cc.workspace_bytes) {
    // The runtime books workspace_bytes() per node; this covers callers that do not
    // (constant folding, tests calling perform directly) and shapes known only now.
    scratch = allocate_on(algo.device(), need);
    cc.workspace = scratch->data;
    cc.workspace_bytes = need;
  }
  ConvTensors tensors = conv_tensors(p.direction, inputs[0].raw(), inputs[1].raw(), output.raw());
  tensors.epilogue = epilogue;
  auto run_with_epilogue = [&] {
    algo.run(p, tensors, cc);
    if (!epilogue.empty() && !algo.fuses_epilogue()) {
      if (algo.device() == DeviceKind::cpu) apply_conv_epilogue(p, tensors, cc);
      else cuda::apply_conv_epilogue_gpu(p, tensors, cc);  // cuDNN tensor ops on the same stream
    }
  };
  if (!options_.debug_check) {
    run_with_epilogue();
    return;
  }
  // DebugMode: keep the inputs, run, check the inputs were left alone, then recompute
  // with the reference on the same inputs and compare.
  const Tensor before[2] = {snapshot(inputs[0]), snapshot(inputs[1])};
  run_with_epilogue();
  synchronize(algo.device());
  for (int i = 0; i < 2; ++i) {
    const Tensor after = copy_to_host(inputs[static_cast<std::size_t>(i)]);
    if (std::memcmp(after.raw(), before[i].raw(), after.nbytes()) != 0)
      throw MismatchError(msg("DebugMode: ", who, " computed with algorithm ", algo.name(), " modified its input ", i,
                              " (inputs must be left unchanged) on ", p.key()));
  }
  const Tensor a = for_reference(before[0]), b = for_reference(before[1]), got = for_reference(output);
  ConvProblem rp = p;
  rp.dtype = a.dtype();
  Tensor want(rp.dtype, output.shape());
  reference_conv(rp, conv_tensors(rp.direction, a.raw(), b.raw(), want.raw()));
  if (!epilogue.empty()) {  // the epilogue's inputs, as host copies in the reference's dtype
    const Tensor bias = epilogue_.bias ? for_reference(inputs[2]) : Tensor();
    const Tensor residual = epilogue_.residual ? for_reference(inputs[1 + extra]) : Tensor();
    ConvTensors ref = conv_tensors(rp.direction, a.raw(), b.raw(), want.raw());
    ref.epilogue = ConvEpilogue{epilogue_.bias ? bias.raw() : nullptr, epilogue_.residual ? residual.raw() : nullptr,
                                epilogue_.activation};
    apply_conv_epilogue(rp, ref, cc);
  }
  ConvCheck c = compare_conv_results(got.raw(), want.raw(), want.numel(), rp.dtype);
  if (p.dtype != rp.dtype) {  // 16-bit storage: judge with the storage type's tolerance
    c.tolerance = conv_relative_tolerance(p.dtype) * std::max(c.scale, 1e-12);
    c.ok = !c.special && c.max_error <= c.tolerance;
  }
  if (!c.ok)
    throw MismatchError(msg("DebugMode: ", who, " computed with algorithm ", algo.name(),
                            " differs from the reference convolution on ", p.key(), ": ", c.to_string()));
}

std::string ConvImplOp::implementation() const {
  if (fixed_) return fixed_->name() + " (" + why_ + ")";
  std::vector<std::string> names;
  for (const auto& c : candidates_) names.push_back(c->name());
  std::string s = (options_.tune ? "fastest as timed on each new shape, else first applicable of ["
                                  : "first applicable of [") + join_text(names) + "] per shape (" + why_ + ")";
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [key, c] : chosen_)
    s += "; " + key + " -> " + c.algorithm->name() + (c.why.empty() ? "" : " (" + c.why + ")");
  return s;
}

const ConvImplOp* as_conv_impl(const Var& v) { return dynamic_cast<const ConvImplOp*>(v.op()); }

}  // namespace convgraph
