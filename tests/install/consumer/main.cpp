// Uses the installed headers and library: builds, compiles and runs a tiny graph.
#include <convgraph/convgraph.hpp>
#include <cstdio>

int main() {
  using namespace convgraph;
  if (!version_matches_headers()) {
    std::printf("library %s, headers %s\n", version(), CONVGRAPH_VERSION_STRING);
    return 1;
  }
  Var x = input(DType::float32, {2}, "x");
  Function f = compile({x}, {x * 2.0 + 1.0});
  const Tensor y = f({Tensor::of<float>({1.f, 2.f})})[0];
  if (y.get(0) != 3.0 || y.get(1) != 5.0) return 1;
  std::printf("consumer ok (convgraph %s)\n", version());
  return 0;
}
