// The KernelRegistry: explicit registration per (op key, device), "supported?" answered
// with a reason, and the runtime running registered kernels.
#include <catch2/catch.hpp>

#include <convgraph/backends/kernel_registry.hpp>
#include <convgraph/convgraph.hpp>


using namespace convgraph;
using Catch::Contains;

TEST_CASE("kernel registry: the elementwise ops have CPU kernels under their keys", "[ops][registry]") {
  const KernelRegistry& r = KernelRegistry::builtin();
  for (const char* key : {"elementwise.unary", "elementwise.binary", "elementwise.where", "elementwise.cast",
                          "elementwise.fused"})
    CHECK(r.find(key, DeviceKind::cpu) != nullptr);
  Var x = input(DType::float32, {4}, "x");
  Var y = gelu(x) + x;
  CHECK(y.op()->kernel_key() == "elementwise.binary");
  CHECK(y.inputs()[0].op()->kernel_key() == "elementwise.unary");
  CHECK(r.supported(*y.op(), DeviceKind::cpu, {x.type(), x.type()}).is_ok());
  // Fusion runs on the host only: no CUDA kernel, and the reason says so.
  Var f = input(DType::float32, {4}, "f");
  Function fn = compile({f}, {relu(f * 2.0) + 1.0});
  for (const Var& v : fn.graph().toposort())
    if (v.op() && v.op()->name() == "fused") {
      const Status s = r.supported(*v.op(), DeviceKind::cuda, {f.type()});
      CHECK_FALSE(s.is_ok());
      CHECK_THAT(s.reason(), Contains("elementwise.fused") && Contains("cuda"));
    }
}

TEST_CASE("kernel registry: registration is explicit and checked", "[ops][registry]") {
  KernelRegistry r;
  register_cpu_kernels(r);
  CHECK(r.find("elementwise.unary", DeviceKind::cpu) != nullptr);
  CHECK(r.find("elementwise.unary", DeviceKind::cuda) == nullptr);
  CHECK_THROWS_AS(register_cpu_kernels(r), ValueError);  // a key registered twice
  CHECK_THROWS_WITH(r.add("elementwise.unary", DeviceKind::cpu, {nullptr, [](auto&, auto&, auto&, auto&) {}}),
                    Contains("elementwise.unary") && Contains("already"));
  // An op without a key answers through its own has_device_kernel / perform.
  Var x = input(DType::float32, {2, 3}, "x");
  Var t = transpose(x);
  CHECK(t.op()->kernel_key().empty());
  CHECK(r.supported(*t.op(), DeviceKind::cpu, {x.type()}).is_ok());
  // Running an op whose device has no kernel is a DeviceError naming the op and the key.
  Var u = exp(x);
  Tensor out = Tensor::full(DType::float32, {2, 3}, 0);
  KernelRegistry empty;
  CHECK_THROWS_AS(empty.run(*u.op(), {Tensor::full(DType::float32, {2, 3}, 1)}, out, {}), DeviceError);
  r.run(*u.op(), {Tensor::full(DType::float32, {2, 3}, 0)}, out, {});
  CHECK(out.to_vector() == std::vector<double>(6, 1.0));
}
