// The fused elementwise op built by the fusion pass: its program's checks, its canonical
// text, type inference. The kernel that runs the program is registered under the key
// "elementwise.fused" (backends/cpu/fused_elementwise.cpp); it runs the very loops of the
// unfused ops, so fused results equal unfused ones bit for bit.
#include "ops/fused_elementwise.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <cstring>
#include <memory>

#include "ops/kernel_util.hpp"

namespace convgraph::detail {

namespace {

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

  std::string_view kernel_key() const override { return "elementwise.fused"; }

 private:
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
