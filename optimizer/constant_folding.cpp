// Constant folding: a foldable, concrete op whose inputs are all constants is evaluated
// now, on the host, and replaced by a constant. Abstract ops have no kernel and are left
// for lowering.
#include "convgraph/backends/kernel_registry.hpp"
#include "convgraph/core/function_graph.hpp"
#include "convgraph/optimizer/compile_stats.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

namespace {

/// Folding larger results would bloat the compiled function for little gain.
constexpr std::int64_t kMaxFoldedElements = std::int64_t{1} << 24;

std::optional<Var> fold_constant(const Var& v, RewriteContext& ctx) {
  const Op* op = v.op();
  if (op == nullptr || op->is_abstract() || !op->foldable() || v.inputs().empty()) return std::nullopt;
  std::vector<Tensor> args;
  std::vector<TensorType> types;
  for (const auto& i : v.inputs()) {
    if (!i.is_constant() || i.constant_value()->device() != DeviceKind::cpu) return std::nullopt;
    args.push_back(*i.constant_value());
    types.push_back(i.type());
  }
  const TensorType& out_type = v.type();
  if (!out_type.fully_known() || out_type.device != DeviceKind::cpu || numel(out_type.shape) > kMaxFoldedElements)
    return std::nullopt;
  try {
    Tensor out(out_type.dtype, out_type.shape);
    ExecContext ec{&ThreadPool::default_pool(), nullptr, 0, nullptr};
    std::shared_ptr<Storage> ws;
    if (const std::size_t n = op->workspace_bytes(types); n > 0) {
      ws = allocate_host(n);
      ec.workspace = ws->data;
      ec.workspace_bytes = n;
    }
    KernelRegistry::builtin().run(*op, args, out, ec);
    return constant(out, v.name());
  } catch (const Error& e) {
    // A failing op (a check on constant data, say) fails at run time, where the error
    // carries the call's context; folding just leaves it alone.
    ctx.stats.notes.push_back(msg("constant_folding: left ", op->label(), " unfolded: ", e.what()));
    return std::nullopt;
  }
}

}  // namespace

void register_constant_folding(RewriteDB& db) {
  db.add_phase("constant_folding", kConstantFoldingPos, {"fast_run", "fast_compile"});
  db.add_local("constant_folding", "fold_constant_nodes", {"fast_run", "fast_compile"}, 0, fold_constant);
}

}  // namespace convgraph
