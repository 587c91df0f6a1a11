// Canonicalize: local rewrites that remove no-op structure so that merge and lowering see
// one canonical form (Theano's canonicalize phase, position 1).
#include <algorithm>
#include <cctype>

#include "convgraph/optimizer/transfer_op.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool named(const Var& v, std::initializer_list<std::string_view> names) {
  if (!v.op()) return false;
  const std::string n = lower(v.op()->name());
  return std::find(names.begin(), names.end(), n) != names.end();
}

/// cast(x) to x's own type, and a transfer to the device x is already on.
std::optional<Var> remove_useless_conversion(const Var& v, RewriteContext&) {
  if (v.inputs().size() != 1) return std::nullopt;
  const Var& x = v.inputs()[0];
  const bool conversion = named(v, {"cast", "astype"}) || as_transfer(v) != nullptr;
  if (conversion && x.type() == v.type()) return x;
  return std::nullopt;
}

/// -(-x) -> x.
std::optional<Var> remove_double_negation(const Var& v, RewriteContext&) {
  if (!named(v, {"neg", "negate"}) || v.inputs().size() != 1) return std::nullopt;
  const Var& inner = v.inputs()[0];
  if (!named(inner, {"neg", "negate"}) || inner.inputs().size() != 1) return std::nullopt;
  if (!(inner.inputs()[0].type() == v.type())) return std::nullopt;
  return inner.inputs()[0];
}

}  // namespace

void register_canonicalize(RewriteDB& db) {
  db.add_phase("canonicalize", kCanonicalizePos, {"fast_run", "fast_compile"});
  db.add_local("canonicalize", "remove_useless_conversion", {"fast_run", "fast_compile"}, 0,
               remove_useless_conversion);
  db.add_local("canonicalize", "remove_double_negation", {"fast_run", "fast_compile"}, 1,
               remove_double_negation);
}

}  // namespace convgraph
