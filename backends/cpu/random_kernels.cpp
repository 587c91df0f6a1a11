// CPU kernel of the random draws (ops/random.cpp), KernelRegistry key "random": one call
// takes the node's next call count, then splits the Philox blocks over the thread pool.
// Element i always comes from block i / per_block, so the values do not depend on the split.
#include "backends/cpu/kernels_nn.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/kernel_util.hpp"
#include "ops/random_info.hpp"

namespace convgraph {

namespace {

void run_random(const Op& op, const std::vector<Tensor>&, Tensor& out, const ExecContext& ctx) {
  const detail::RandomDraw d = detail::next_draw(op);
  const std::int64_t n = out.numel(), per = detail::values_per_block(out.dtype());
  detail::parallel_range(ctx, (n + per - 1) / per, 2048, [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(random_blocks, d, out.dtype(), out.raw(), n, b, e);
  });
}

}  // namespace

void register_cpu_random_kernels(KernelRegistry& r) { r.add("random", DeviceKind::cpu, {nullptr, run_random}); }

}  // namespace convgraph
