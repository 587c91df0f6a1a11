// The fused elementwise op: one node that evaluates a chain of elementwise ops in blocks
// of kBlock output elements. Each block gathers (or reads in place) its inputs, then runs
// every instruction over the whole block, so each instruction is a tight loop the
// compiler vectorises and the intermediates stay in cache instead of making a round trip
// through memory per op. The scalar formulas are the rows of ops/elementwise_table.hpp,
// the very functions the unfused ops run, so fused results equal unfused ones bit for bit (a NaN only as a
// class: the sign and payload of a NaN made by arithmetic are unspecified).
#include "ops/fused_elementwise.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <cstring>
#include <memory>

#include "ops/broadcast_iter.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph::detail {

namespace {

constexpr std::int64_t kBlock = 512;       // output elements per block (registers fit in L1/L2)
constexpr std::int64_t kTaskElems = 1 << 14;  // elements per parallel task at least

bool is_host_float(DType t) { return t == DType::float32 || t == DType::float64; }

// Infix operators carry a precedence; function-style binaries print as calls.
struct BinaryText {
  const char* text;
  int prec;  // 0: function call
};
BinaryText binary_text(BinaryKind k) {
  constexpr BinaryText t[] = {{"+", 2}, {"-", 2}, {"*", 3}, {"/", 3}, {"pow", 0}, {"max", 0}, {"min", 0},
                              {"<", 1}, {"<=", 1}, {">", 1}, {">=", 1}, {"==", 1}, {"!=", 1}};
  static_assert(std::size(t) == kBinaryKinds, "one text per row of CONVGRAPH_BINARY_OPS, in row order");
  return t[static_cast<int>(k)];
}

// ---- kernels over one block -------------------------------------------------------
// The formulas are the rows of ops/elementwise_table.hpp, as in the unfused ops.

template <class T>
void run_unary(const FusedInstr& ins, const T* x, T* y, std::int64_t n) {
  ew::visit_unary(ins.unary, [&](auto fn) {
    using Fn = decltype(fn);
    if constexpr (ew::unary_applies<T>(Fn::kind)) {
      const T a = static_cast<T>(ins.param[0]), b = static_cast<T>(ins.param[1]);
      for (std::int64_t i = 0; i < n; ++i) y[i] = Fn::apply(x[i], a, b);
    }
  });
}

template <class T>
void run_binary(BinaryKind k, const T* a, const T* b, void* out, std::int64_t n) {
  ew::visit_binary(k, [&](auto fn) {
    using Fn = decltype(fn);
    if constexpr (is_comparison(Fn::kind)) {
      bool* m = static_cast<bool*>(out);
      for (std::int64_t i = 0; i < n; ++i) m[i] = Fn::apply(a[i], b[i]);
    } else {
      T* y = static_cast<T*>(out);
      for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(Fn::apply(a[i], b[i]));
    }
  });
}

template <class T>
void run_where(const bool* c, const T* a, const T* b, T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = c[i] ? a[i] : b[i];
}

template <class From, class To>
void run_cast(const From* x, To* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<To>(x[i]);
}

template <class T>
void splat(void* dst, double v, std::int64_t n) {
  T* d = static_cast<T*>(dst);
  const T t = static_cast<T>(v);
  for (std::int64_t i = 0; i < n; ++i) d[i] = t;
}

void splat_bytes(void* dst, const void* src, std::size_t esize, std::int64_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  for (std::int64_t i = 0; i < n; ++i) std::memcpy(d + i * static_cast<std::int64_t>(esize), src, esize);
}

// How one input reaches a block: read in place (same shape as the output), one value
// splatted once per task, or gathered through broadcast strides.
struct InputPlan {
  enum class Mode { direct, scalar, gather } mode = Mode::direct;
  const unsigned char* base = nullptr;
  std::size_t esize = 0;
  std::vector<std::int64_t> strides;  // per output axis, in elements
};

// Copies output positions [s, s + n) of a broadcast input into dst, one run along the
// last axis at a time.
void gather(const InputPlan& in, const Shape& os, std::int64_t s, std::int64_t n, unsigned char* dst,
            std::vector<std::int64_t>& idx) {
  const std::size_t r = os.size();
  const std::size_t es = in.esize;
  idx.assign(r, 0);
  std::int64_t off = 0;
  for (std::size_t a = r, rest = static_cast<std::size_t>(s); a-- > 0;) {
    idx[a] = static_cast<std::int64_t>(rest) % os[a];
    rest /= static_cast<std::size_t>(os[a]);
    off += idx[a] * in.strides[a];
  }
  const std::int64_t w = os[r - 1], st = in.strides[r - 1];
  std::int64_t done = 0;
  while (done < n) {
    const std::int64_t run = std::min(n - done, w - idx[r - 1]);
    unsigned char* d = dst + done * static_cast<std::int64_t>(es);
    const unsigned char* src = in.base + off * static_cast<std::int64_t>(es);
    if (st == 0) splat_bytes(d, src, es, run);
    else if (st == 1) std::memcpy(d, src, static_cast<std::size_t>(run) * es);
    else
      for (std::int64_t j = 0; j < run; ++j) std::memcpy(d + j * static_cast<std::int64_t>(es), src + j * st * static_cast<std::int64_t>(es), es);
    done += run;
    idx[r - 1] += run;
    off += run * st;
    if (idx[r - 1] < w) continue;
    off -= w * st;  // carry into the outer axes
    idx[r - 1] = 0;
    for (std::size_t a = r - 1; a-- > 0;) {
      off += in.strides[a];
      if (++idx[a] < os[a]) break;
      off -= os[a] * in.strides[a];
      idx[a] = 0;
    }
  }
}

class FusedElementwiseOp final : public Op {
 public:
  explicit FusedElementwiseOp(FusedProgram p) : prog_(std::move(p)) {
    prog_.validate();
    text_ = prog_.text();
  }
  const FusedProgram& program() const { return prog_; }

  std::string name() const override { return "fused"; }
  std::string params() const override { return text_; }
  std::string implementation() const override { return msg("fused ", prog_.op_count(), " ops"); }

  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != prog_.inputs.size())
      throw ValueError(msg("fused{", text_, "}: expects ", prog_.inputs.size(), " inputs, got ", in.size()));
    TensorType out;
    out.dtype = prog_.reg_dtype(prog_.registers() - 1);
    out.device = DeviceKind::cpu;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in[i].dtype != prog_.inputs[i] || in[i].device != DeviceKind::cpu)
        throw TypeError(msg("fused{", text_, "}: input ", i, " must be a host ", dtype_name(prog_.inputs[i]),
                            " tensor, got ", in[i].to_string()));
      out.shape = broadcast_shapes(out.shape, in[i].shape, "fused");
    }
    return out;
  }

  std::vector<Var> grad(const std::vector<Var>&, const Var&, const Var&) const override {
    throw TypeError(msg("fused{", text_, "}: fused elementwise nodes have no gradient; fusion runs inside "
                        "compile(), after autodiff - take gradients of the unfused graph"));
  }

  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    const std::int64_t total = out.numel();
    if (total == 0) return;
    const Shape& os = out.shape();
    const std::size_t nin = in.size();
    std::vector<InputPlan> plans(nin);
    for (std::size_t i = 0; i < nin; ++i) {
      InputPlan& p = plans[i];
      p.base = static_cast<const unsigned char*>(in[i].raw());
      p.esize = dtype_size(in[i].dtype());
      if (in[i].numel() == total) p.mode = InputPlan::Mode::direct;  // same layout as the output
      else if (in[i].numel() == 1) p.mode = InputPlan::Mode::scalar;
      else {
        p.mode = InputPlan::Mode::gather;
        p.strides = broadcast_strides(in[i].shape(), os);
      }
    }
    const int nreg = prog_.registers();
    const int last = nreg - 1;
    const std::int64_t blocks = (total + kBlock - 1) / kBlock;
    auto* out_base = static_cast<unsigned char*>(out.raw());
    const std::size_t out_es = dtype_size(out.dtype());
    parallel_range(ctx, blocks, std::max<std::int64_t>(1, kTaskElems / kBlock), [&](std::int64_t b0, std::int64_t b1) {
      // One kBlock slot of 8 bytes per register; doubles keep every slot aligned. Left
      // uninitialised: every slot is written before it is read.
      std::unique_ptr<double[]> scratch(new double[static_cast<std::size_t>(nreg) * kBlock]);
      auto slot = [&](int r) { return reinterpret_cast<unsigned char*>(scratch.get() + static_cast<std::size_t>(r) * kBlock); };
      std::vector<const void*> reg(static_cast<std::size_t>(nreg), nullptr);
      std::vector<std::int64_t> idx;
      // Scalars and constants are the same in every block: splat them once.
      for (std::size_t i = 0; i < nin; ++i)
        if (plans[i].mode == InputPlan::Mode::scalar) splat_bytes(slot(static_cast<int>(i)), plans[i].base, plans[i].esize, kBlock);
      for (std::size_t k = 0; k < prog_.code.size(); ++k) {
        const FusedInstr& ins = prog_.code[k];
        if (ins.code != FusedInstr::Code::constant) continue;
        const int r = static_cast<int>(nin + k);
        if (ins.dtype == DType::float32) splat<float>(slot(r), ins.value, kBlock);
        else if (ins.dtype == DType::float64) splat<double>(slot(r), ins.value, kBlock);
        else splat<bool>(slot(r), ins.value, kBlock);
        reg[static_cast<std::size_t>(r)] = slot(r);
      }
      for (std::int64_t blk = b0; blk < b1; ++blk) {
        const std::int64_t s = blk * kBlock;
        const std::int64_t n = std::min(kBlock, total - s);
        for (std::size_t i = 0; i < nin; ++i) {
          const InputPlan& p = plans[i];
          unsigned char* buf = slot(static_cast<int>(i));
          if (p.mode == InputPlan::Mode::direct) reg[i] = p.base + s * static_cast<std::int64_t>(p.esize);
          else if (p.mode == InputPlan::Mode::scalar) reg[i] = buf;
          else {
            gather(p, os, s, n, buf, idx);
            reg[i] = buf;
          }
        }
        for (std::size_t k = 0; k < prog_.code.size(); ++k) {
          const FusedInstr& ins = prog_.code[k];
          if (ins.code == FusedInstr::Code::constant) continue;
          const int r = static_cast<int>(nin + k);
          void* dst = r == last ? static_cast<void*>(out_base + s * static_cast<std::int64_t>(out_es)) : slot(r);
          run(ins, reg, dst, n);
          reg[static_cast<std::size_t>(r)] = dst;
        }
      }
    });
  }

 private:
  void run(const FusedInstr& ins, const std::vector<const void*>& reg, void* dst, std::int64_t n) const {
    const void* a = reg[static_cast<std::size_t>(ins.a)];
    const bool f64 = prog_.reg_dtype(ins.code == FusedInstr::Code::where ? ins.b : ins.a) == DType::float64;
    switch (ins.code) {
      case FusedInstr::Code::unary:
        if (f64) run_unary(ins, static_cast<const double*>(a), static_cast<double*>(dst), n);
        else run_unary(ins, static_cast<const float*>(a), static_cast<float*>(dst), n);
        break;
      case FusedInstr::Code::binary: {
        const void* b = reg[static_cast<std::size_t>(ins.b)];
        if (f64) run_binary(ins.binary, static_cast<const double*>(a), static_cast<const double*>(b), dst, n);
        else run_binary(ins.binary, static_cast<const float*>(a), static_cast<const float*>(b), dst, n);
        break;
      }
      case FusedInstr::Code::where: {
        const void* b = reg[static_cast<std::size_t>(ins.b)];
        const void* c = reg[static_cast<std::size_t>(ins.c)];
        if (f64) run_where(static_cast<const bool*>(a), static_cast<const double*>(b), static_cast<const double*>(c), static_cast<double*>(dst), n);
        else run_where(static_cast<const bool*>(a), static_cast<const float*>(b), static_cast<const float*>(c), static_cast<float*>(dst), n);
        break;
      }
      case FusedInstr::Code::cast:
        if (f64 && ins.dtype == DType::float32) run_cast(static_cast<const double*>(a), static_cast<float*>(dst), n);
        else if (!f64 && ins.dtype == DType::float64) run_cast(static_cast<const float*>(a), static_cast<double*>(dst), n);
        else std::memcpy(dst, a, static_cast<std::size_t>(n) * dtype_size(ins.dtype));
        break;
      case FusedInstr::Code::constant: break;
    }
  }

  FusedProgram prog_;
  std::string text_;
};

// Shortest text that reads back as the same double.
std::string number_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string format_constant(double v, DType t) {
  char buf[40];
  std::snprintf(buf, sizeof buf, t == DType::float32 ? "%.9g" : "%.17g", v);
  return t == DType::boolean ? (v != 0 ? "true" : "false") : buf;
}

}  // namespace

DType FusedProgram::reg_dtype(int r) const {
  const int nin = static_cast<int>(inputs.size());
  return r < nin ? inputs[static_cast<std::size_t>(r)] : code[static_cast<std::size_t>(r - nin)].dtype;
}

int FusedProgram::op_count() const {
  int n = 0;
  for (const auto& c : code) n += c.code != FusedInstr::Code::constant ? 1 : 0;
  return n;
}

void FusedProgram::validate() const {
  if (code.empty() || code.back().code == FusedInstr::Code::constant)
    throw ValueError("fused: the program must end with an operation");
  for (DType t : inputs)
    if (!is_host_float(t) && t != DType::boolean)
      throw TypeError(msg("fused: input dtype ", dtype_name(t), " is not float32, float64 or bool"));
  const int nin = static_cast<int>(inputs.size());
  for (std::size_t k = 0; k < code.size(); ++k) {
    const FusedInstr& c = code[k];
    const int self = nin + static_cast<int>(k);
    auto operand = [&](int r, const char* what) {
      if (r < 0 || r >= self) throw ValueError(msg("fused: instruction ", k, " reads register ", r, " (", what, ")"));
      return reg_dtype(r);
    };
    auto bad = [&](const std::string& why) { return TypeError(msg("fused: instruction ", k, ": ", why)); };
    switch (c.code) {
      case FusedInstr::Code::constant:
        if (!is_host_float(c.dtype) && c.dtype != DType::boolean) throw bad("constant of unsupported dtype");
        break;
      case FusedInstr::Code::unary:
        if (!is_host_float(c.dtype) || operand(c.a, "operand") != c.dtype) throw bad("unary needs a float operand of its dtype");
        break;
      case FusedInstr::Code::binary: {
        const DType ta = operand(c.a, "left"), tb = operand(c.b, "right");
        if (ta != tb || !is_host_float(ta)) throw bad("binary needs two float operands of one dtype");
        if (c.dtype != (is_comparison(c.binary) ? DType::boolean : ta)) throw bad("wrong result dtype");
        break;
      }
      case FusedInstr::Code::where:
        if (operand(c.a, "condition") != DType::boolean || operand(c.b, "then") != c.dtype ||
            operand(c.c, "else") != c.dtype || !is_host_float(c.dtype))
          throw bad("where needs a bool condition and float branches of its dtype");
        break;
      case FusedInstr::Code::cast:
        if (!is_host_float(operand(c.a, "operand")) || !is_host_float(c.dtype)) throw bad("cast between float types only");
        break;
    }
  }
}

std::string FusedProgram::text() const {
  const int nin = static_cast<int>(inputs.size());
  const int nreg = registers();
  std::vector<int> uses(static_cast<std::size_t>(nreg), 0);
  for (const auto& c : code)
    for (int r : {c.a, c.b, c.c})
      if (r >= 0) ++uses[static_cast<std::size_t>(r)];
  // Each register's expression and its precedence (5: atom). Values read more than once
  // are named t0, t1, ... and defined first, so the text stays linear in the program.
  std::vector<std::string> expr(static_cast<std::size_t>(nreg));
  std::vector<int> prec(static_cast<std::size_t>(nreg), 5);
  std::string lets;
  int temps = 0;
  for (int i = 0; i < nin; ++i) expr[static_cast<std::size_t>(i)] = msg("i", i);
  auto wrap = [&](int r, bool paren) { return paren ? "(" + expr[static_cast<std::size_t>(r)] + ")" : expr[static_cast<std::size_t>(r)]; };
  auto p = [&](int r) { return prec[static_cast<std::size_t>(r)]; };
  for (std::size_t k = 0; k < code.size(); ++k) {
    const FusedInstr& c = code[k];
    const auto r = static_cast<std::size_t>(nin) + k;
    switch (c.code) {
      case FusedInstr::Code::constant: expr[r] = format_constant(c.value, c.dtype); break;
      case FusedInstr::Code::unary:
        if (c.unary == UnaryKind::neg) {
          expr[r] = "-" + wrap(c.a, p(c.a) < 5);
          prec[r] = 4;
        } else {
          // name(x) or, with parameters, name(x,a[,b]): "clip(i0,0,6)".
          const auto& tr = unary_traits(c.unary);
          expr[r] = std::string(tr.name) + "(" + expr[static_cast<std::size_t>(c.a)];
          for (int i = 0; i < tr.params; ++i) expr[r] += "," + number_text(c.param[i]);
          expr[r] += ")";
        }
        break;
      case FusedInstr::Code::binary: {
        const BinaryText t = binary_text(c.binary);
        if (t.prec == 0) {
          expr[r] = msg(t.text, "(", expr[static_cast<std::size_t>(c.a)], ",", expr[static_cast<std::size_t>(c.b)], ")");
        } else {  // the right operand is parenthesised at equal precedence: the text is the tree
          expr[r] = wrap(c.a, p(c.a) < t.prec) + t.text + wrap(c.b, p(c.b) <= t.prec);
          prec[r] = t.prec;
        }
        break;
      }
      case FusedInstr::Code::where:
        expr[r] = msg("where(", expr[static_cast<std::size_t>(c.a)], ",", expr[static_cast<std::size_t>(c.b)], ",",
                      expr[static_cast<std::size_t>(c.c)], ")");
        break;
      case FusedInstr::Code::cast: expr[r] = msg(dtype_name(c.dtype), "(", expr[static_cast<std::size_t>(c.a)], ")"); break;
    }
    if (uses[r] > 1 && c.code != FusedInstr::Code::constant) {
      const std::string name = msg("t", temps++);
      lets += name + "=" + expr[r] + "; ";
      expr[r] = name;
      prec[r] = 5;
    }
  }
  std::string sig;
  for (int i = 0; i < nin; ++i) sig += msg(i ? "," : "", dtype_name(inputs[static_cast<std::size_t>(i)]));
  return lets + expr.back() + " [" + sig + "]";
}

OpPtr make_fused_elementwise(FusedProgram program) {
  return std::make_shared<FusedElementwiseOp>(std::move(program));
}

const FusedProgram* fused_program(const Op& op) {
  auto* f = dynamic_cast<const FusedElementwiseOp*>(&op);
  return f ? &f->program() : nullptr;
}

}  // namespace convgraph::detail
