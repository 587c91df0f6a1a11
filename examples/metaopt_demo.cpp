// The meta-optimizer and its tuning cache: a small network with three convolutions is
// compiled twice with conv_meta. The first compile times every applicable algorithm per
// convolution (metaopt.verbose=1 prints the table); the second finds every decision in
// the cache file and does no timing.
//
//   example_metaopt_demo [CACHE_FILE] [--version]   (default: a fresh file in the temporary folder)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <convgraph/convgraph.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

using namespace convgraph;

namespace {

double compile_and_time(const std::vector<Var>& inputs, const std::vector<Var>& outputs, const Mode& mode,
                        Function* out) {
  const auto t0 = std::chrono::steady_clock::now();
  Function f = compile(inputs, outputs, mode);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out) *out = f;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::string cache_arg;
  CLI::App app{"The meta-optimizer and its tuning cache: one graph compiled twice with conv_meta.", "metaopt_demo"};
  app.set_version_flag("--version", std::string("metaopt_demo ") + convgraph::version());
  app.add_option("cache", cache_arg, "tuning-cache file (default: a fresh file in the temporary folder, removed after)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help and --version exit 0, bad usage 2
  }
  const bool own_cache = cache_arg.empty();
  const std::string cache = !own_cache ? cache_arg
                                       : (fs::temp_directory_path() /
                                          ("convgraph_metaopt_demo_" + std::to_string(::getpid())) / "tuning.txt")
                                             .string();
  fs::remove(cache);  // the first compile must start cold

  // image -> 3x3 conv -> relu -> strided 3x3 conv -> relu -> 1x1 conv
  Var x = input(DType::float32, {8, 16, 32, 32}, "image");
  Var w1 = input(DType::float32, {32, 16, 3, 3}, "w1");
  Var w2 = input(DType::float32, {32, 32, 3, 3}, "w2");
  Var w3 = input(DType::float32, {64, 32, 1, 1}, "w3");
  Var h1 = relu(conv2d(x, w1, {.border_mode = "half", .name = "conv1"}));
  Var h2 = relu(conv2d(h1, w2, {.border_mode = "half", .subsample = {2, 2}, .name = "conv2"}));
  Var y = conv2d(h2, w3, {.name = "conv3"});

  // FFT is not a default candidate; metaopt.optimizer_including adds it to the timed set.
  Mode mode = Mode::from_flags("optimizer_including=conv_meta,metaopt.verbose=1,"
                               "metaopt.optimizer_including=conv_fft,metaopt.cache=" + cache);
  mode.log = [](const std::string& line) { std::printf("%s\n", line.c_str()); };  // default: stderr
  std::printf("flags: %s\n\n--- first compile (cold cache) ---\n", mode.to_string().c_str());
  std::fflush(stdout);
  Function first(nullptr);
  const double t_first = compile_and_time({x, w1, w2, w3}, {y}, mode, &first);
  std::printf("first compile: %.1f ms\n\n--- second compile (same graph, same cache) ---\n", t_first * 1e3);
  std::fflush(stdout);
  Function second(nullptr);
  const double t_second = compile_and_time({x, w1, w2, w3}, {y}, mode, &second);
  std::printf("second compile: %.1f ms (%.0fx faster)\n\n", t_second * 1e3, t_second > 0 ? t_first / t_second : 0.0);
  std::printf("what each node became (second compile):\n%s", second.describe().c_str());

  auto out = second({Tensor::full(DType::float32, {8, 16, 32, 32}, 0.1f), Tensor::full(DType::float32, {32, 16, 3, 3}, 0.01f),
                     Tensor::full(DType::float32, {32, 32, 3, 3}, 0.01f), Tensor::full(DType::float32, {64, 32, 1, 1}, 0.01f)});
  std::printf("\noutput %s, y[0,0,0,0] = %g\ncache file: %s\n", shape_to_string(out[0].shape()).c_str(),
              out[0].at<float>({0, 0, 0, 0}), cache.c_str());
  if (own_cache) fs::remove_all(fs::path(cache).parent_path());
}
