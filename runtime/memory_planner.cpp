#include "runtime/memory_planner.hpp"

#include <algorithm>
#include <numeric>

#include "core/checked_math.hpp"

namespace convgraph::detail {

namespace {
constexpr std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }
}

ArenaPlan plan_arena(const std::vector<BufferRequest>& requests) {
  ArenaPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<std::size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by definition order so plans are deterministic.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return requests[a].bytes > requests[b].bytes;
  });
  std::vector<std::size_t> placed;
  for (std::size_t idx : order) {
    const BufferRequest& r = requests[idx];
    if (r.bytes > static_cast<std::size_t>(kMaxBytes) - 63)
      throw MemoryError(msg("plan_arena: a buffer of ", r.bytes, " bytes cannot be addressed"));
    plan.total_bytes = checked_bytes_add(plan.total_bytes, align64(r.bytes), "plan_arena", "the intermediates");
    // Intervals already placed that are alive at the same time, sorted by offset.
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (std::size_t p : placed) {
      const BufferRequest& q = requests[p];
      if (q.first <= r.last && r.first <= q.last)
        busy.emplace_back(plan.offsets[p], plan.offsets[p] + align64(q.bytes));
    }
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap that holds the request, else the end.
    const std::size_t need = align64(r.bytes);
    std::size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (auto [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= need && lo - cursor < best_gap) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    if (best == SIZE_MAX) best = cursor;
    plan.offsets[idx] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, checked_bytes_add(best, need, "plan_arena", "the arena"));
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace convgraph::detail
