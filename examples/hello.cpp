// The README example: a convolution, its gradient, compiled and run.
#include <convgraph/convgraph.hpp>
#include <cstdio>

int main() {
  using namespace convgraph;
  Var x = input(DType::float32, {1, 1, 5, 5}, "image");
  Var w = input(DType::float32, {2, 1, 3, 3}, "filters");
  Var y = conv2d(x, w, {.border_mode = "half"});           // abstract: says what, not how
  Var loss = sum(relu(y) * relu(y));
  Var dw = grad(loss, w);                                   // adds AbstractConvGradWeights
  Function f = compile({x, w}, {y, dw}, Mode::fast_run());  // lowered to cpu.corrmm
  auto out = f({Tensor::full(DType::float32, {1, 1, 5, 5}, 1), Tensor::full(DType::float32, {2, 1, 3, 3}, 0.5)});
  std::printf("y[0,0,2,2] = %g, dw[0,0,1,1] = %g\n", out[0].at<float>({0, 0, 2, 2}), out[1].at<float>({0, 0, 1, 1}));
  std::printf("%s", f.describe().c_str());
}
