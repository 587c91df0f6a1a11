// Canonicalize: local rewrites that remove no-op structure so that merge and lowering see
// one canonical form (Theano's canonicalize phase, position 1).
#include "convgraph/optimizer/transfer_op.hpp"
#include "ops/elementwise_info.hpp"
#include "ops/reduce_info.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

namespace {

using detail::ElementwiseInfo;

// Ops are recognised by kind (ops/elementwise_info.hpp), never by name.
bool is_negation(const Var& v) {
  if (!v.op()) return false;
  const ElementwiseInfo i = detail::elementwise_info(*v.op());
  return i.cls == ElementwiseInfo::Class::unary && i.unary == detail::UnaryKind::neg;
}

bool is_cast(const Var& v) {
  return v.op() && detail::elementwise_info(*v.op()).cls == ElementwiseInfo::Class::cast;
}

/// cast(x) to x's own type, and a transfer to the device x is already on.
std::optional<Var> remove_useless_conversion(const Var& v, RewriteContext&) {
  if (v.inputs().size() != 1) return std::nullopt;
  const Var& x = v.inputs()[0];
  const bool conversion = is_cast(v) || as_transfer(v) != nullptr;
  if (conversion && x.type() == v.type()) return x;
  return std::nullopt;
}

/// -(-x) -> x.
std::optional<Var> remove_double_negation(const Var& v, RewriteContext&) {
  if (!is_negation(v) || v.inputs().size() != 1) return std::nullopt;
  const Var& inner = v.inputs()[0];
  if (!is_negation(inner) || inner.inputs().size() != 1) return std::nullopt;
  if (!(inner.inputs()[0].type() == v.type())) return std::nullopt;
  return inner.inputs()[0];
}

/// An elementwise op reading fill_like(x) (zeros_like from gradients: relu's is
/// where(out > 0, g, zeros_like(g))) whose shape its other inputs already give reads the
/// value as a scalar instead: no buffer is filled and streamed back in, and the constant
/// becomes an immediate of a fused elementwise program.
std::optional<Var> fill_as_scalar(const Var& v, RewriteContext&) {
  if (!v.op() || v.type().device != DeviceKind::cpu) return std::nullopt;  // scalars live on the host
  const ElementwiseInfo::Class cls = detail::elementwise_info(*v.op()).cls;
  if (cls != ElementwiseInfo::Class::unary && cls != ElementwiseInfo::Class::binary &&
      cls != ElementwiseInfo::Class::where)
    return std::nullopt;
  std::vector<Var> in = v.inputs();
  bool changed = false;
  for (Var& i : in)
    if (i.op() && i.op()->kernel_key() == "fill" && i.rank() > 0 && is_float(i.dtype())) {
      i = scalar(detail::fill_value(*i.op()), i.dtype());
      changed = true;
    }
  if (!changed) return std::nullopt;
  Var r = apply(v.node()->op, in, v.name());
  if (!(r.type() == v.type())) return std::nullopt;  // the fill gave the shape
  return r;
}

}  // namespace

void register_canonicalize(RewriteDB& db) {
  db.add_phase("canonicalize", kCanonicalizePos, {"fast_run", "fast_compile"});
  db.add_local("canonicalize", "remove_useless_conversion", {"fast_run", "fast_compile"}, 0,
               remove_useless_conversion);
  db.add_local("canonicalize", "remove_double_negation", {"fast_run", "fast_compile"}, 1,
               remove_double_negation);
  db.add_local("canonicalize", "fill_as_scalar", {"fast_run"}, 2, fill_as_scalar);
}

}  // namespace convgraph
