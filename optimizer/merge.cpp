// Merge (common-subexpression elimination): nodes applying equal ops (Op::equals) to the
// same inputs become one, and so do constants with equal dtype, shape and bytes.
#include <cstring>
#include <functional>
#include <string_view>
#include <unordered_map>

#include "convgraph/core/function_graph.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

namespace {

std::size_t mix(std::size_t h, std::size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

std::size_t constant_hash(const Tensor& t) {
  std::size_t h = std::hash<int>{}(static_cast<int>(t.dtype()));
  for (auto d : t.shape()) h = mix(h, std::hash<std::int64_t>{}(d));
  return mix(h, std::hash<std::string_view>{}(std::string_view(static_cast<const char*>(t.raw()), t.nbytes())));
}

bool same_constant(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.device() == DeviceKind::cpu &&
         b.device() == DeviceKind::cpu && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::size_t apply_hash(const Var& v) {
  std::size_t h = v.op()->hash();
  for (const auto& i : v.inputs()) h = mix(h, std::hash<const void*>{}(i.node()));
  return h;
}

bool same_apply(const Var& a, const Var& b) {
  if (!a.op()->equals(*b.op()) || a.inputs().size() != b.inputs().size()) return false;
  for (std::size_t i = 0; i < a.inputs().size(); ++i)
    if (!a.inputs()[i].same(b.inputs()[i])) return false;
  return true;
}

}  // namespace

int merge_graph(FunctionGraph& graph) {
  // One pass in topological order suffices: a merge rewires clients before they are
  // visited, so their inputs already point at the surviving node.
  std::unordered_map<std::size_t, std::vector<Var>> seen;
  int merged = 0;
  for (const Var& v : graph.toposort()) {
    if (!v.op() && !v.is_constant()) continue;  // inputs and shared variables: each is its own value
    const bool is_const = v.is_constant();
    if (is_const && v.constant_value()->device() != DeviceKind::cpu) continue;
    const std::size_t h = is_const ? constant_hash(*v.constant_value()) : apply_hash(v);
    auto& bucket = seen[h];
    bool done = false;
    for (const Var& keep : bucket) {
      if (keep.is_constant() != is_const) continue;
      const bool equal = is_const ? same_constant(*keep.constant_value(), *v.constant_value()) : same_apply(keep, v);
      if (!equal) continue;
      graph.replace(v, keep, "merge");
      ++merged;
      done = true;
      break;
    }
    if (!done) bucket.push_back(v);
  }
  return merged;
}

void register_merge(RewriteDB& db) {
  db.add_phase("merge", kMergePos, {"fast_run", "fast_compile"});
  db.add_global("merge", "merge_common_subexpressions", {"fast_run", "fast_compile"}, 0,
                [](RewriteContext& ctx) { merge_graph(ctx.graph); });
}

}  // namespace convgraph
