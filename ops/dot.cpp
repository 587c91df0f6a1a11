// dot / matmul: numpy matmul semantics (1-D operands are promoted to a row or a column and
// the extra axis dropped again; leading "batch" axes broadcast). Kernels: "matmul".
#include "convgraph/ops/math.hpp"
#include "convgraph/ops/nnet.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "ops/kernel_util.hpp"
#include "ops/matmul_shape.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph {

using detail::MatmulShape;

namespace {

std::int64_t merge_batch_dim(std::int64_t a, std::int64_t b, const TensorType& ta, const TensorType& tb) {
  if (a == 1) return b;
  if (b == 1) return a;
  if (a >= 0 && b >= 0 && a != b)
    throw ShapeError(msg("matmul: batch dimensions ", a, " and ", b, " of ", shape_to_string(ta.shape), " and ",
                         shape_to_string(tb.shape), " do not broadcast"));
  return a >= 0 ? a : b;
}

}  // namespace

MatmulShape detail::matmul_shape(const TensorType& a, const TensorType& b) {
  if (a.rank() == 0 || b.rank() == 0)
    throw ShapeError(msg("matmul: operands must have rank >= 1 (use * for scalars), got ", shape_to_string(a.shape),
                         " and ", shape_to_string(b.shape)));
  MatmulShape s;
  const int ra = a.rank(), rb = b.rank();
  s.m = ra >= 2 ? a.shape[static_cast<std::size_t>(ra - 2)] : 1;
  s.k = a.shape.back();
  const std::int64_t kb = rb >= 2 ? b.shape[static_cast<std::size_t>(rb - 2)] : b.shape[0];
  s.n = rb >= 2 ? b.shape.back() : 1;
  if (!detail::dims_compatible(s.k, kb))
    throw ShapeError(msg("matmul: inner dimensions differ: a ", shape_to_string(a.shape), " has ", s.k, " columns, b ",
                         shape_to_string(b.shape), " has ", kb, " rows"));
  if (s.k < 0) s.k = kb;
  s.a_batch.assign(a.shape.begin(), a.shape.end() - std::min(ra, 2));
  s.b_batch.assign(b.shape.begin(), b.shape.end() - std::min(rb, 2));
  const std::size_t nb = std::max(s.a_batch.size(), s.b_batch.size());
  s.a_batch.insert(s.a_batch.begin(), nb - s.a_batch.size(), 1);
  s.b_batch.insert(s.b_batch.begin(), nb - s.b_batch.size(), 1);
  for (std::size_t i = 0; i < nb; ++i) s.batch.push_back(merge_batch_dim(s.a_batch[i], s.b_batch[i], a, b));
  return s;
}

namespace {

std::vector<int> swap_last_two(int rank) {
  std::vector<int> p;
  for (int i = 0; i < rank; ++i) p.push_back(i);
  std::swap(p[static_cast<std::size_t>(rank - 2)], p[static_cast<std::size_t>(rank - 1)]);
  return p;
}

class MatmulOp final : public Op {
 public:
  std::string name() const override { return "matmul"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    const TensorType &a = in[0], &b = in[1];
    detail::check_dtype("matmul", "a", a.dtype, {DType::float32, DType::float64, DType::int32, DType::int64});
    if (a.dtype != b.dtype)
      throw TypeError(
          msg("matmul: operands have different dtypes ", a.to_string(), " and ", b.to_string(), "; cast one of them"));
    const MatmulShape s = detail::matmul_shape(a, b);
    Shape out = s.batch;
    if (a.rank() >= 2) out.push_back(s.m);
    if (b.rank() >= 2) out.push_back(s.n);
    return TensorType{a.dtype, std::move(out), a.device};
  }

  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override {
    const Var &a = in[0], &b = in[1];
    if (!is_float(a.dtype())) return {Var(), Var()};
    // Promote 1-D operands (and the matching axes of g) to matrices, so one rule serves all.
    const Var a2 = a.rank() == 1 ? dimshuffle(a, {-1, 0}) : a;
    const Var b2 = b.rank() == 1 ? dimshuffle(b, {0, -1}) : b;
    Var g2 = g;
    if (a.rank() == 1 || b.rank() == 1) {
      std::vector<int> p;
      const int gr = g.rank();
      const int batch = gr - (a.rank() >= 2) - (b.rank() >= 2);
      for (int i = 0; i < batch; ++i) p.push_back(i);
      p.push_back(a.rank() >= 2 ? batch : -1);
      p.push_back(b.rank() >= 2 ? gr - 1 : -1);
      g2 = dimshuffle(g, std::move(p));
    }
    Var ga = matmul(g2, dimshuffle(b2, swap_last_two(b2.rank())));
    Var gb = matmul(dimshuffle(a2, swap_last_two(a2.rank())), g2);
    // Operands broadcast over batch axes get their gradient summed back.
    if (ga.shape() != a2.shape()) ga = sum_to(ga, a2);
    if (gb.shape() != b2.shape()) gb = sum_to(gb, b2);
    if (a.rank() == 1) ga = reshape_like(ga, a);
    if (b.rank() == 1) gb = reshape_like(gb, b);
    return {ga, gb};
  }

  std::string_view kernel_key() const override { return "matmul"; }
};

}  // namespace

Var matmul(const Var& a, const Var& b) { return convgraph::apply(std::make_shared<MatmulOp>(), {a, b}); }

Var dot(const Var& a, const Var& b) { return matmul(a, b); }

}  // namespace convgraph
