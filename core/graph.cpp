#include "convgraph/core/graph.hpp"

#include <atomic>
#include <functional>
#include <sstream>
#include <unordered_set>

#include "core/checked_math.hpp"

namespace convgraph {

namespace {
std::uint64_t next_id() {
  static std::atomic<std::uint64_t> counter{1};
  return counter++;
}
void require(const Var& v, const char* what) {
  if (!v.defined()) throw ValueError(msg("Var::", what, ": the variable is undefined (default-constructed)"));
}
}  // namespace

bool TensorType::fully_known() const {
  for (auto d : shape)
    if (d < 0) return false;
  return true;
}

std::string TensorType::to_string() const {
  std::ostringstream os;
  os << dtype_name(dtype) << shape_to_string(shape);
  if (device != DeviceKind::cpu) os << '@' << device_name(device);
  return os.str();
}

bool TensorType::accepts(const TensorType& v) const {
  if (v.dtype != dtype || v.rank() != rank()) return false;
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] >= 0 && v.shape[i] >= 0 && shape[i] != v.shape[i]) return false;
  return true;
}

const TensorType& Var::type() const {
  require(*this, "type");
  return node_->type;
}
const std::string& Var::name() const {
  require(*this, "name");
  return node_->name;
}
Var& Var::named(std::string name) {
  require(*this, "named");
  node_->name = std::move(name);
  return *this;
}
const Op* Var::op() const { return node_ ? node_->op.get() : nullptr; }
const std::vector<Var>& Var::inputs() const {
  require(*this, "inputs");
  return node_->inputs;
}
bool Var::is_input() const { return node_ && !node_->op && !node_->value && !node_->shared; }
bool Var::is_shared() const { return node_ && node_->shared != nullptr; }
bool Var::is_constant() const { return node_ && node_->value != nullptr; }
const Tensor* Var::constant_value() const { return node_ ? node_->value.get() : nullptr; }

std::vector<Var> Op::grad(const std::vector<Var>&, const Var&, const Var&) const {
  throw TypeError(msg(label(), ": this op is not differentiable"));
}

void Op::perform(const std::vector<Tensor>&, Tensor&, const ExecContext&) const {
  throw CompileError(msg(label(), ": this op has no kernel of its own"));
}

std::size_t Op::hash() const { return std::hash<std::string>{}(name() + '\x1f' + params()); }

std::string Op::label() const {
  const std::string p = params();
  return p.empty() ? name() : name() + "{" + p + "}";
}

Var apply(OpPtr op, std::vector<Var> inputs, std::string name) {
  if (!op) throw ValueError("apply: null op");
  std::vector<TensorType> types;
  types.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw ValueError(msg(op->label(), ": input ", i, " is an undefined variable"));
    types.push_back(inputs[i].type());
  }
  auto node = std::make_shared<Node>();
  node->type = op->infer(types);
  // One place for every op: a static type whose known dims overflow (or are negative)
  // could never be allocated; refuse it when the node is built, naming the op.
  detail::check_static_shape(node->type.shape, node->type.dtype, op->label());
  node->op = std::move(op);
  node->inputs = std::move(inputs);
  node->name = std::move(name);
  node->id = next_id();
  return Var(std::move(node));
}

Var input(DType dtype, Shape shape, std::string name) {
  for (auto d : shape)
    if (d < -1)
      throw ShapeError(msg("input '", name, "': dimension ", d, " in ", shape_to_string(shape),
                           " is invalid (use -1 for unknown)"));
  detail::check_static_shape(shape, dtype, msg("input '", name, "'"));
  auto node = std::make_shared<Node>();
  node->type = TensorType{dtype, std::move(shape), DeviceKind::cpu};
  node->name = std::move(name);
  node->id = next_id();
  return Var(std::move(node));
}

Var constant(Tensor value, std::string name) {
  if (!value.defined()) throw ValueError("constant: the tensor is undefined");
  auto node = std::make_shared<Node>();
  node->type = TensorType{value.dtype(), value.shape(), value.device()};
  node->value = std::make_shared<const Tensor>(value.contiguous());
  node->name = std::move(name);
  node->id = next_id();
  return Var(std::move(node));
}

Var scalar(double value, DType dtype) { return constant(Tensor::scalar(value, dtype)); }

std::vector<Var> topological_order(const std::vector<Var>& outputs) {
  std::vector<Var> order;
  std::unordered_set<const Node*> done;
  // Iterative DFS: deep graphs (long training loops unrolled) must not overflow the stack.
  std::vector<std::pair<Var, std::size_t>> stack;
  for (const auto& out : outputs) {
    if (!out.defined() || done.count(out.node())) continue;
    stack.emplace_back(out, 0);
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      const auto& ins = v.node()->inputs;
      if (next < ins.size()) {
        const Var child = ins[next++];
        if (!done.count(child.node())) stack.emplace_back(child, 0);
        continue;
      }
      if (done.insert(v.node()).second) order.push_back(v);
      stack.pop_back();
    }
  }
  return order;
}

}  // namespace convgraph
