// Fuzz target: the abstract convolution family (conv/conv_params.cpp, ops/abstract_conv.cpp,
// conv/conv_problem.cpp) and, for small accepted problems, the CPU algorithms.
//
// From the input: 1-3 spatial axes (sometimes 0 or 4), shapes, strides, dilations,
// paddings (valid/full/half/same, an unknown name, an int, per-axis ints, per-axis
// asymmetric pairs, wrong lengths), groups, flip, dtypes, a direction (forward, grad
// inputs, grad weights), a target shape and shape source for the grad ops, unknown dims,
// and boundary values (0, -1, 2^31, 2^62, INT64_MIN...). Every call either returns or
// throws a convgraph::Error. Properties checked:
//   - accepted shapes agree with docs/DESIGN.md's formula (computed here in 128-bit);
//   - a small, valid configuration is accepted;
//   - the Theano shape helpers invert each other (grad inputs / grad weights of a forward
//     size give back the input / kernel size);
//   - infer() and problem() agree;
//   - a problem of at most 20k multiply-adds gives the same result with the reference
//     and with one CPU algorithm picked by the input (cpu.corrmm and cpu.direct must
//     accept every float32/float64 problem); inputs stay untouched.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/ops/abstract_conv.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "fuzz/fuzz_input.hpp"

using namespace convgraph;

namespace {

using i64 = std::int64_t;
__extension__ typedef __int128 Wide;  // the oracle's arithmetic

constexpr i64 kSmall = i64{1} << 20;  // "small" configurations must be accepted
constexpr i64 kMaxMacs = 20000;
constexpr i64 kMaxElements = i64{1} << 16;
constexpr std::size_t kMaxWorkspace = std::size_t{64} << 20;

struct Case {
  ConvDirection dir = ConvDirection::forward;
  ConvParams params;      // as the user gave them (not normalized)
  Shape x, w, y;          // forward geometry: x (N, C, in...), w (K, C/G, k...), y (N, K, out...)
  Shape target;           // grad ops: input_shape / filter_shape
  std::optional<Shape> source;
  DType dtype = DType::float32, dtype2 = DType::float32;
  std::size_t workspace_limit = std::numeric_limits<std::size_t>::max();
  std::size_t algo_pick = 0;
  bool threaded = false;
  std::uint32_t seed = 1;
};

std::size_t axis_count(fuzz::Input& in, std::size_t nsp) {
  const std::uint8_t b = in.byte();
  return b < 240 ? nsp : b % 5;
}

BorderMode decode_border(fuzz::Input& in, std::size_t nsp) {
  switch (in.choice(9)) {
    case 0: return BorderMode("valid");
    case 1: return BorderMode("full");
    case 2: case 3: return BorderMode("half");
    case 4: return BorderMode("same");
    case 5: return BorderMode(std::string_view(in.text(8)));  // usually an unknown name: ValueError
    case 6: return BorderMode(in.number(0, 3));
    case 7: {
      std::vector<std::pair<i64, i64>> pads;
      for (std::size_t a = 0, n = axis_count(in, nsp); a < n; ++a) {
        const i64 p = in.number(0, 3);
        pads.emplace_back(p, p);
      }
      return BorderMode(pads);
    }
    default: {
      std::vector<std::pair<i64, i64>> pads;
      for (std::size_t a = 0, n = axis_count(in, nsp); a < n; ++a) {
        const i64 pre = in.number(0, 4);
        pads.emplace_back(pre, in.number(0, 4));
      }
      return BorderMode(pads);
    }
  }
}

DType decode_dtype(fuzz::Input& in) {
  const std::uint8_t b = in.byte();
  if (b < 120) return DType::float32;
  if (b < 240) return DType::float64;
  constexpr DType kOthers[] = {DType::float16, DType::bfloat16, DType::int32, DType::int64, DType::boolean};
  return kOthers[b % 5];
}

/// Forward output size of one axis by docs/DESIGN.md's formula, exact for any int64 operands
/// (128-bit, with the paddings of full and half folded in algebraically); nullopt when an
/// operand is unknown or invalid, or the size does not fit in int64.
std::optional<i64> oracle_axis(const ConvParams& p, std::size_t a, i64 i, i64 k) {
  const i64 s = p.stride[a], d = p.dilation[a];
  if (i < 1 || k < 1 || s < 1 || d < 1) return std::nullopt;
  const Wide dk = Wide(k - 1) * d + 1;  // <= 2^126
  Wide num = 0;                          // i + p0 + p1 - dk
  switch (p.border.kind) {
    case BorderKind::valid: num = Wide(i) - dk; break;
    case BorderKind::full: num = Wide(i) + dk - 2; break;
    case BorderKind::half: num = Wide(i) + (dk / 2) * 2 - dk; break;
    case BorderKind::explicit_pads:
      if (p.border.pads[a].first < 0 || p.border.pads[a].second < 0) return std::nullopt;
      num = Wide(i) + p.border.pads[a].first + p.border.pads[a].second - dk;
      break;
  }
  const Wide o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;  // floor division
  if (o > Wide(std::numeric_limits<i64>::max()) || o < Wide(std::numeric_limits<i64>::min())) return std::nullopt;
  return static_cast<i64>(o);
}

bool all_positive(const Shape& s) {
  for (i64 v : s)
    if (v < 1) return false;
  return true;
}

bool all_small(const Shape& s) {
  for (i64 v : s)
    if (v > kSmall) return false;
  return true;
}

/// The forward output shape of (x, w) when everything is known, positive and consistent;
/// nullopt otherwise.
std::optional<Shape> oracle_forward(const ConvParams& p, const Shape& x, const Shape& w) {
  const auto rank = static_cast<std::size_t>(p.ndim + 2);
  if (x.size() != rank || w.size() != rank || !all_positive(x) || !all_positive(w)) return std::nullopt;
  if (x[1] % p.groups != 0 || w[0] % p.groups != 0 || Wide(w[1]) * p.groups != x[1]) return std::nullopt;
  Shape y{x[0], w[0]};
  for (std::size_t a = 0; a + 2 < rank; ++a) {
    const auto o = oracle_axis(p, a, x[a + 2], w[a + 2]);
    if (!o || *o < 1) return std::nullopt;
    y.push_back(*o);
  }
  return y;
}

std::optional<ConvParams> normalized(const ConvParams& p) {
  try {
    return p.normalized("fuzz");
  } catch (const Error&) {
    return std::nullopt;
  }
}

Case decode(fuzz::Input& in) {
  Case c;
  const std::uint8_t nd = in.byte();
  c.params.ndim = nd < 248 ? 1 + nd % 3 : (nd % 2 ? 0 : 4);
  const std::size_t nsp = static_cast<std::size_t>(std::clamp(c.params.ndim, 1, 3));
  c.dir = static_cast<ConvDirection>(in.choice(3));
  c.params.filter_flip = in.flag();

  const i64 C = in.number(1, 4);
  switch (in.choice(8)) {
    case 4: c.params.groups = C; break;
    case 5: c.params.groups = 2; break;
    case 6: c.params.groups = 3; break;
    case 7: c.params.groups = in.number(0, 4); break;
    default: c.params.groups = 1;
  }
  const i64 G = c.params.groups;
  const i64 N = in.number(1, 3);
  i64 K = 0;
  if (in.flag() && G >= 1) {
    const i64 m = in.number(1, 3);
    if (__builtin_mul_overflow(G, m, &K)) K = m;
  } else {
    K = in.number(1, 4);
  }
  const i64 Cg = in.byte() < 224 && G >= 1 && C % G == 0 ? C / G : in.number(0, 4);
  c.x = {N, C};
  c.w = {K, Cg};
  for (std::size_t a = 0; a < nsp; ++a) {
    c.x.push_back(in.number(1, 9));
    c.w.push_back(in.number(1, 4));
  }
  if (in.byte() >= 250) c.x.push_back(in.number(1, 3));  // a rank mismatch now and then
  for (std::size_t a = 0, n = axis_count(in, nsp); a < n; ++a) c.params.stride.push_back(in.number(1, 3));
  for (std::size_t a = 0, n = axis_count(in, nsp); a < n; ++a) c.params.dilation.push_back(in.number(1, 2));
  c.params.border = decode_border(in, nsp);
  c.dtype = decode_dtype(in);
  c.dtype2 = in.byte() < 248 ? c.dtype : decode_dtype(in);
  switch (in.choice(16)) {
    case 0: c.params.compute_dtype = DType::float64; break;
    case 1: c.params.compute_dtype = decode_dtype(in); break;
    default: break;
  }

  // The output (grad ops' dy): the forward formula's answer, sometimes off by one or random.
  const auto p = normalized(c.params);
  const auto y = p ? oracle_forward(*p, c.x, c.w) : std::nullopt;
  const std::uint8_t ymode = in.byte();
  if (y && ymode < 200) {
    c.y = *y;
  } else {
    c.y = {N, K};
    for (std::size_t a = 0; a < nsp; ++a) c.y.push_back(in.number(1, 9));
  }
  if (ymode >= 200 && ymode < 216) {
    i64& v = c.y[in.choice(c.y.size())];
    if (v < std::numeric_limits<i64>::max()) v += 1;
  }

  const Shape& exact = c.dir == ConvDirection::grad_inputs ? c.x : c.w;
  switch (in.choice(6)) {
    case 0: break;  // no target: derived where unambiguous
    case 1: case 2: c.target = exact; break;
    case 3:
      c.target = exact;
      for (auto& v : c.target)
        if (in.flag()) v = kUnknown;
      break;
    default:
      for (std::size_t a = 0, n = axis_count(in, nsp + 2); a < n; ++a) c.target.push_back(in.number(-1, 9));
  }
  if (c.dir == ConvDirection::forward && in.byte() < 240) c.target.clear();
  if (c.dir != ConvDirection::forward && in.byte() >= 240) c.source = in.flag() ? exact : c.y;

  // Unknown (-1) operand dims now and then: infer() must cope with partial shapes.
  if (in.byte() >= 240) {
    Shape* ops[] = {&c.x, &c.w, &c.y};
    Shape& s = *ops[in.choice(3)];
    s[in.choice(s.size())] = kUnknown;
  }
  const std::uint8_t ws = in.byte();
  if (ws >= 224) c.workspace_limit = static_cast<std::size_t>(in.number(0, 4096));
  c.algo_pick = in.byte();
  c.threaded = in.flag();
  c.seed = in.raw<std::uint32_t>() | 1;
  return c;
}

// ---- the Theano shape helpers -------------------------------------------------------

void check_helpers(const Case& c) {
  try {
    const Shape out = get_conv_output_shape(c.x, c.w, c.params.border, c.params.stride, c.params.dilation);
    const auto p = normalized(c.params);
    FUZZ_CHECK(out.size() == c.x.size(), "get_conv_output_shape returned rank ", out.size());
    if (p && static_cast<std::size_t>(p->ndim + 2) == c.x.size()) {
      for (std::size_t a = 0; a + 2 < c.x.size(); ++a) {
        const auto o = oracle_axis(*p, a, c.x[a + 2], c.w[a + 2]);
        if (o) FUZZ_CHECK(out[a + 2] == *o, "get_conv_output_shape axis ", a, ": ", out[a + 2], ", formula ", *o);
      }
    }
  } catch (const Error&) {
  }
  const auto p = normalized(c.params);
  if (!p) return;
  // Per axis: grad inputs / grad weights of the forward size give back the input / kernel
  // (or an overflow is reported as an Error).
  for (std::size_t a = 0; a < static_cast<std::size_t>(p->ndim) && a + 2 < c.x.size(); ++a) try {
    const i64 i = c.x[a + 2], k = c.w[a + 2], s = p->stride[a], d = p->dilation[a];
    const auto o = oracle_axis(*p, a, i, k);
    if (!o || *o < 1) continue;
    const int ax = static_cast<int>(a);
    const i64 fwd = get_conv_shape_1axis(i, k, p->border, ax, s, d);
    FUZZ_CHECK(fwd == *o, "get_conv_shape_1axis(", i, ", ", k, ") = ", fwd, ", formula ", *o);
    const i64 gi = get_conv_gradinputs_shape_1axis(k, *o, p->border, ax, s, d);
    if (s == 1) FUZZ_CHECK(gi == i, "gradinputs_shape_1axis(k ", k, ", top ", *o, ") = ", gi, ", input was ", i);
    else FUZZ_CHECK(gi == kUnknown, "gradinputs_shape_1axis with stride ", s, " is not unknown: ", gi);
    const i64 gw = get_conv_gradweights_shape_1axis(i, *o, p->border, ax, s, d);
    if (s == 1 && p->border.kind != BorderKind::half)
      FUZZ_CHECK(gw == k, "gradweights_shape_1axis(i ", i, ", top ", *o, ") = ", gw, ", kernel was ", k);
    else
      FUZZ_CHECK(gw == kUnknown || gw == k, "gradweights_shape_1axis gave ", gw, ", kernel was ", k);
  } catch (const Error&) {
  }
  try {
    (void)get_conv_gradinputs_shape(c.w, c.y, c.params.border, c.params.stride, c.params.dilation, c.params.groups);
  } catch (const Error&) {
  }
  try {
    (void)get_conv_gradweights_shape(c.x, c.y, c.params.border, c.params.stride, c.params.dilation, c.params.groups);
  } catch (const Error&) {
  }
  try {
    (void)check_conv_gradinputs_shape(c.x, c.w, c.y, c.params.border, c.params.stride, c.params.dilation);
  } catch (const Error&) {
  }
  try {
    assert_conv_shape(c.y, "fuzz");
  } catch (const Error&) {
  }
}

// ---- running a small problem ----------------------------------------------------------

bool mul_into(i64& acc, i64 v) { return !__builtin_mul_overflow(acc, v, &acc); }

/// Number of multiply-adds, or -1 when it does not fit.
i64 macs(const ConvProblem& p) {
  i64 m = 1;
  for (i64 v : {p.N, p.K, p.Cg(), p.kernel_numel(), p.out_numel()})
    if (!mul_into(m, v)) return -1;
  return m;
}

/// Inner steps of cpu.reference, or -1 when it does not fit. Its grad inputs gathers: every
/// input element visits every tap of its group's filters, which can exceed the MACs by far
/// (output 1x1x1 with a 3x2x1026 kernel: 18k MACs, 113M steps).
i64 reference_steps(const ConvProblem& p) {
  if (p.direction != ConvDirection::grad_inputs) return macs(p);
  i64 m = 1;
  for (i64 v : {p.N, p.C, p.Kg(), p.kernel_numel(), p.in_numel()})
    if (!mul_into(m, v)) return -1;
  return m;
}

std::vector<double> integers(std::size_t n, std::uint32_t& state) {
  std::vector<double> v(n);
  for (auto& e : v) {
    state = state * 1664525u + 1013904223u;
    e = static_cast<double>(static_cast<int>((state >> 24) % 7) - 3);
  }
  return v;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

/// Runs `algo` on typed copies of the operands; the written operand starts as NaN, the
/// workspace is exactly workspace_bytes(p) of 0xff. Returns the output as doubles.
template <class T>
std::vector<double> run_typed(const ConvAlgorithm& algo, const ConvProblem& p, const std::vector<double>& x0,
                              const std::vector<double>& w0, const std::vector<double>& y0, ThreadPool* pool) {
  std::vector<T> x(x0.begin(), x0.end()), w(w0.begin(), w0.end()), y(y0.begin(), y0.end());
  std::vector<T>& out = p.direction == ConvDirection::forward ? y : p.direction == ConvDirection::grad_inputs ? x : w;
  std::fill(out.begin(), out.end(), std::numeric_limits<T>::quiet_NaN());
  const std::vector<T> xs = x, ws = w, ys = y;
  const std::size_t bytes = algo.workspace_bytes(p);
  std::unique_ptr<void, FreeDeleter> buf;
  if (bytes > 0) {
    void* mem = nullptr;
    if (::posix_memalign(&mem, 64, bytes) != 0) return {};
    buf.reset(mem);
    std::memset(mem, 0xff, bytes);
  }
  ConvContext ctx;
  ctx.pool = pool;
  ctx.workspace = buf.get();
  ctx.workspace_bytes = bytes;
  try {
    algo.run(p, ConvTensors{x.data(), w.data(), y.data(), {}}, ctx);
  } catch (const Error& e) {
    FUZZ_CHECK(false, algo.name(), " accepted ", p.key(), " but run() threw: ", e.what());
  }
  auto same = [](const std::vector<T>& a, const std::vector<T>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
  };
  if (&out != &x) FUZZ_CHECK(same(x, xs), algo.name(), " modified x on ", p.key());
  if (&out != &w) FUZZ_CHECK(same(w, ws), algo.name(), " modified w on ", p.key());
  if (&out != &y) FUZZ_CHECK(same(y, ys), algo.name(), " modified y on ", p.key());
  return {out.begin(), out.end()};
}

bool has_tag(const ConvAlgorithm& a, const char* tag) {
  for (const auto& t : a.tags())
    if (t == tag) return true;
  return false;
}

void compute(const ConvProblem& base, const Case& c) {
  ConvProblem p = base;
  p.workspace_limit = c.workspace_limit;
  if (p.dtype != DType::float32 && p.dtype != DType::float64) return;
  for (const i64 m : {macs(p), reference_steps(p)})
    if (m < 0 || m > kMaxMacs) return;
  for (i64 n : {p.x_numel(), p.w_numel(), p.y_numel()})
    if (n > kMaxElements) return;

  static const bool verbose = std::getenv("CONVGRAPH_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "fuzz_conv: problem %s\n", p.key().c_str());
  std::vector<const ConvAlgorithm*> algos;
  for (const auto& a : AlgorithmRegistry::builtin().all())
    if (a->device() == DeviceKind::cpu && a->name() != "cpu.reference") algos.push_back(a.get());
  if (algos.empty()) return;
  if (p.compute == p.dtype && p.workspace_limit == std::numeric_limits<std::size_t>::max()) {
    for (const char* name : {"cpu.corrmm", "cpu.direct"}) {
      const ConvAlgorithm* a = AlgorithmRegistry::builtin().find(name);
      FUZZ_CHECK(a != nullptr, name, " is not registered");
      const Status s = a->applicable(p);
      FUZZ_CHECK(s.is_ok(), name, " declined ", p.key(), ": ", s.reason());
    }
  }
  const ConvAlgorithm* algo = nullptr;
  for (std::size_t i = 0; i < algos.size() && !algo; ++i) {
    const ConvAlgorithm* a = algos[(c.algo_pick + i) % algos.size()];
    if (a->applicable(p) && a->workspace_bytes(p) <= kMaxWorkspace) algo = a;
  }
  if (!algo) return;
  if (verbose) std::fprintf(stderr, "fuzz_conv: running %s\n", algo->name().c_str());

  std::uint32_t state = c.seed;
  const std::vector<double> x = integers(static_cast<std::size_t>(p.x_numel()), state);
  const std::vector<double> w = integers(static_cast<std::size_t>(p.w_numel()), state);
  const std::vector<double> y = integers(static_cast<std::size_t>(p.y_numel()), state);

  ConvProblem q = p;  // the oracle: float64 reference
  q.dtype = q.compute = DType::float64;
  q.workspace_limit = std::numeric_limits<std::size_t>::max();
  static const std::shared_ptr<const ConvAlgorithm> reference = make_cpu_reference_algorithm();
  const std::vector<double> ref = run_typed<double>(*reference, q, x, w, y, nullptr);

  static ThreadPool pool(2);
  ThreadPool* tp = c.threaded ? &pool : nullptr;
  const std::vector<double> got = p.dtype == DType::float64 ? run_typed<double>(*algo, p, x, w, y, tp)
                                                            : run_typed<float>(*algo, p, x, w, y, tp);
  if (got.empty() && !ref.empty()) return;  // workspace allocation failed
  double scale = 1, err = 0;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(got[i] - ref[i]);
    err = std::isnan(d) ? INFINITY : std::max(err, d);
  }
  const bool transformed = has_tag(*algo, "conv_fft") || has_tag(*algo, "conv_winograd");
  const double tol = p.dtype == DType::float64 ? (transformed ? 1e-9 : 1e-10) : (transformed ? 1e-3 : 1e-4);
  FUZZ_CHECK(err / scale <= tol, algo->name(), " differs from the reference on ", p.key(), ": max error ", err,
             " (scale ", scale, ", tolerance ", tol, ")");
}

// ---- the op ---------------------------------------------------------------------------

void check_op(const Case& c) {
  const bool fwd = c.dir == ConvDirection::forward;
  std::vector<TensorType> inputs;
  switch (c.dir) {
    case ConvDirection::forward: inputs = {{c.dtype, c.x}, {c.dtype2, c.w}}; break;
    case ConvDirection::grad_inputs: inputs = {{c.dtype, c.w}, {c.dtype2, c.y}}; break;
    case ConvDirection::grad_weights: inputs = {{c.dtype, c.x}, {c.dtype2, c.y}}; break;
  }
  if (c.source) inputs.push_back({c.dtype, *c.source});

  // A small, valid configuration (with the full target shape for the grad ops) must be
  // accepted: the documented checks are the only reasons to reject.
  const auto p = normalized(c.params);
  bool valid = p && is_float(c.dtype) && c.dtype == c.dtype2 && !c.source && all_small(c.x) &&
               all_small(c.w) && all_small(c.y) && all_small(p->stride) && all_small(p->dilation);
  if (valid && p->border.kind == BorderKind::explicit_pads)
    for (const auto& [pre, post] : p->border.pads) valid = valid && pre <= kSmall && post <= kSmall;
  std::optional<Shape> y;
  if (valid) y = oracle_forward(*p, c.x, c.w);
  valid = valid && y && *y == c.y && (fwd ? c.target.empty() : c.target == (c.dir == ConvDirection::grad_inputs ? c.x : c.w));

  std::shared_ptr<AbstractConvOp> op;
  TensorType out;
  try {
    op = std::make_shared<AbstractConvOp>(c.dir, c.params, c.target);
    out = op->infer(inputs);
  } catch (const Error& e) {
    FUZZ_CHECK(!valid, "a valid ", AbstractConvOp::op_name(c.dir), " was rejected: ", e.what());
    return;
  }
  (void)op->params();
  (void)op->tags();
  bool known = true;
  for (const auto& t : inputs) known = known && t.fully_known();
  if (!known || !out.fully_known()) return;

  // Accepted with every dim known: the geometry satisfies the forward formula.
  const ConvParams& np = op->conv_params();
  const Shape& x = c.dir == ConvDirection::grad_inputs ? out.shape : c.x;
  const Shape& w = c.dir == ConvDirection::grad_weights ? out.shape : c.w;
  if (all_positive(x) && all_positive(w)) {
    const auto expect = oracle_forward(np, x, w);
    FUZZ_CHECK(expect.has_value(), op->who(), " accepted an invalid geometry: x ", shape_to_string(x), ", w ",
               shape_to_string(w), ", ", np.to_string());
    const Shape& got = fwd ? out.shape : c.y;
    FUZZ_CHECK(*expect == got, op->who(), ": output ", shape_to_string(got), " but the formula gives ",
               shape_to_string(*expect), " for x ", shape_to_string(x), ", w ", shape_to_string(w), ", ",
               np.to_string());
  }
  ConvProblem problem;
  try {
    problem = op->problem(inputs);
  } catch (const Error&) {
    return;  // e.g. zero-size dims: infer() allows them, problems do not
  }
  FUZZ_CHECK(problem.x_shape() == x && problem.w_shape() == w, "problem() ", problem.key(),
             " disagrees with infer(): x ", shape_to_string(x), ", w ", shape_to_string(w));
  FUZZ_CHECK(problem.y_shape() == (fwd ? out.shape : c.y), "problem() ", problem.key(), " has another output than ",
             shape_to_string(fwd ? out.shape : c.y));
  (void)problem.key();
  compute(problem, c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  Case c;
  try {
    c = decode(in);
  } catch (const Error&) {
    return 0;  // e.g. an unknown border mode name
  }
  check_helpers(c);
  check_op(c);
  return 0;
}
