// Bad inputs across the public API (issue 9), one table row each: the call, the
// convgraph::Error subclass it must raise, and substrings its message must contain:
// the op, the argument and the offending values. Nothing may crash, abort, or throw
// anything but the named subclass.
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <convgraph/core/thread_pool.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <typeinfo>
#include <vector>

using namespace convgraph;

namespace {

constexpr DType f32 = DType::float32;
constexpr DType f64 = DType::float64;
constexpr DType i32 = DType::int32;
constexpr std::int64_t U = kUnknown;

enum class Kind { type, shape, value, flag, compile, runtime, memory };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::type: return "TypeError";
    case Kind::shape: return "ShapeError";
    case Kind::value: return "ValueError";
    case Kind::flag: return "FlagError";
    case Kind::compile: return "CompileError";
    case Kind::runtime: return "RuntimeError";
    case Kind::memory: return "MemoryError";
  }
  return "?";
}

bool is_kind(const Error& e, Kind k) {
  switch (k) {
    case Kind::type: return dynamic_cast<const TypeError*>(&e) != nullptr;
    case Kind::shape: return dynamic_cast<const ShapeError*>(&e) != nullptr;
    case Kind::value: return dynamic_cast<const ValueError*>(&e) != nullptr;
    case Kind::flag: return dynamic_cast<const FlagError*>(&e) != nullptr;
    case Kind::compile: return dynamic_cast<const CompileError*>(&e) != nullptr;
    case Kind::runtime: return dynamic_cast<const RuntimeError*>(&e) != nullptr;
    case Kind::memory: return dynamic_cast<const MemoryError*>(&e) != nullptr;
  }
  return false;
}

struct Case {
  std::string name;                  ///< unique: what is wrong, in a few words
  Kind kind;
  std::vector<std::string> needles;  ///< the op, the argument, the values
  std::function<void()> call;
};

// Runs one row; returns an empty string when it behaves, else what went wrong.
std::string check(const Case& c) {
  try {
    c.call();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (!is_kind(e, c.kind)) return std::string("threw ") + typeid(e).name() + ", not " + kind_name(c.kind) + ": " + what;
    for (const auto& n : c.needles)
      if (what.find(n) == std::string::npos) return "message lacks \"" + n + "\": " + what;
    return {};
  } catch (const std::exception& e) {
    return std::string("threw a non-convgraph exception ") + typeid(e).name() + ": " + e.what();
  } catch (...) {
    return "threw a non-exception";
  }
  return "did not throw";
}

Var in(Shape s, DType t = f32, const char* name = "x") { return input(t, std::move(s), name); }

std::vector<Case> tensor_cases() {
  const Tensor t = Tensor::zeros(f32, {2, 3});
  auto st = allocate_host(64);
  return {
      {"Tensor: negative dim", Kind::shape, {"Tensor", "(2, -3)", "-3"}, [] { Tensor(f32, {2, -3}); }},
      {"Tensor: byte size overflows", Kind::shape, {"Tensor", "4611686018427387904 * 4"}, [] { Tensor(f32, {1LL << 62}); }},
      {"Tensor: element count overflows", Kind::shape, {"Tensor", "1099511627776 * 1099511627776"},
       [] { Tensor::zeros(f32, {1LL << 40, 1LL << 40}); }},
      {"Tensor: cannot allocate", Kind::memory, {"Tensor", "1125899906842624 bytes"}, [] { Tensor(f32, {1LL << 48}); }},
      {"allocate_host: too many bytes", Kind::memory, {"allocate_host", "4611686018427387904"},
       [] { allocate_host(std::size_t{1} << 62); }},
      {"Tensor: storage too small", Kind::memory, {"Tensor", "64 bytes", "(17,)"}, [st] { Tensor(st, f32, {17}); }},
      {"Tensor: negative storage offset", Kind::value, {"Tensor", "offset -1"}, [st] { Tensor(st, f32, {2}, -1); }},
      {"Tensor::from: wrong value count", Kind::shape, {"Tensor::from", "3 values", "(2, 2)"},
       [] { Tensor::from({1, 2, 3}, {2, 2}); }},
      {"Tensor::from_vector: wrong value count", Kind::shape, {"Tensor::from_vector", "2 values", "(3,)"},
       [] { Tensor::from_vector<float>({1, 2}, {3}); }},
      {"Tensor::at: index out of range", Kind::shape, {"Tensor::at", "index 5", "axis 0", "size 2"},
       [t] { t.at<float>({5, 0}); }},
      {"Tensor::at: wrong index count", Kind::shape, {"Tensor::at", "1 indices", "rank-2"}, [t] { t.at<float>({0}); }},
      {"Tensor::at: wrong dtype", Kind::type, {"Tensor", "float64", "float32"}, [t] { t.at<double>({0, 0}); }},
      {"Tensor::dim: axis out of range", Kind::shape, {"Tensor::dim", "axis 5", "rank 2"}, [t] { t.dim(5); }},
      {"Tensor::permute: repeated axis", Kind::shape, {"Tensor::permute", "(0, 0)"}, [t] { t.permute({0, 0}); }},
      {"Tensor::permute: wrong axis count", Kind::shape, {"Tensor::permute", "1 axes", "rank-2"}, [t] { t.permute({0}); }},
      {"Tensor::slice: axis out of range", Kind::shape, {"Tensor::slice", "axis 3", "rank 2"}, [t] { t.slice(3, 0, 1); }},
      {"Tensor::slice: zero step", Kind::value, {"Tensor::slice", "step", "got 0"}, [t] { t.slice(0, 0, 1, 0); }},
      {"Tensor::reshape: element count differs", Kind::shape, {"Tensor::reshape", "(2, 3)", "(4, 2)"},
       [t] { t.reshape({4, 2}); }},
      {"Tensor::reshape: negative dims", Kind::shape, {"Tensor::reshape", "(-2, -3)", "-2"}, [t] { t.reshape({-2, -3}); }},
      {"Tensor::reshape: two -1", Kind::shape, {"Tensor::reshape", "(-1, -1)", "more than one -1"},
       [t] { t.reshape({-1, -1}); }},
      {"Tensor::reshape: target overflows", Kind::shape, {"Tensor::reshape", "1099511627776"},
       [t] { t.reshape({1LL << 40, 1LL << 40}); }},
      {"Tensor::copy_from: shape differs", Kind::shape, {"Tensor::copy_from", "(3,)", "(2, 3)"},
       [t] { Tensor(t).copy_from(Tensor::zeros(f32, {3})); }},
      {"max_abs_diff: shapes differ", Kind::shape, {"max_abs_diff", "(2, 3)", "(3,)"},
       [t] { max_abs_diff(t, Tensor::zeros(f32, {3})); }},
      {"numel: negative dim", Kind::shape, {"numel", "(4, -2)", "-2"}, [] { numel({4, -2}); }},
      {"parse_dtype: unknown name", Kind::value, {"float13"}, [] { parse_dtype("float13"); }},
  };
}

std::vector<Case> graph_cases() {
  return {
      {"input: negative dim", Kind::shape, {"input 'x'", "-2"}, [] { input(f32, {2, -2}, "x"); }},
      {"input: shape overflows", Kind::shape, {"input 'x'", "1099511627776"},
       [] { input(f32, {1LL << 40, 1LL << 40}, "x"); }},
      {"constant: undefined tensor", Kind::value, {"constant", "undefined"}, [] { constant(Tensor()); }},
      {"Var::type: undefined variable", Kind::value, {"Var::type", "undefined"}, [] { (void)Var().type(); }},
      {"reshape: undefined operand", Kind::value, {"reshape", "input 0", "undefined"}, [] { reshape(Var(), {2}); }},
      {"concatenate: undefined operand", Kind::value, {"concatenate", "input 1", "undefined"},
       [] { concatenate({in({2}), Var()}); }},
      {"grad: non-scalar cost", Kind::type, {"grad", "cost", "float32(3,)"}, [] {
         Var x = in({3});
         grad(x * 2.0, x);
       }},
      {"grad: integer cost", Kind::type, {"grad", "cost", "int32"}, [] {
         Var x = in({}, i32);
         grad(x, x);
       }},
      {"grad: disconnected wrt", Kind::value, {"grad", "'w'"}, [] {
         Var x = in({}, f32, "x");
         Var w = in({}, f32, "w");
         grad(x * 2.0, w);
       }},
  };
}

std::vector<Case> shape_op_cases() {
  return {
      {"reshape: element count differs", Kind::shape, {"reshape", "(2, 3)", "(4, 2)"}, [] { reshape(in({2, 3}), {4, 2}); }},
      {"reshape: two -1", Kind::value, {"reshape", "(-1, -1)", "more than one -1"}, [] { reshape(in({2, 3}), {-1, -1}); }},
      {"reshape: dim below -1", Kind::value, {"reshape", "-3", "(-3, 2)"}, [] { reshape(in({2, 3}), {-3, 2}); }},
      {"reshape: -1 does not divide", Kind::shape, {"reshape", "(2, 3)", "6 elements", "(4, -1)"},
       [] { reshape(in({2, 3}), {4, -1}); }},
      {"reshape_like: element counts differ", Kind::shape, {"reshape_like", "(2, 3)", "(5,)"},
       [] { reshape_like(in({2, 3}), in({5})); }},
      {"flatten: ndim 0", Kind::value, {"flatten", "ndim 0", "(2, 3, 4)"}, [] { flatten(in({2, 3, 4}), 0); }},
      {"flatten: ndim above rank", Kind::value, {"flatten", "ndim 4", "(2, 3, 4)"}, [] { flatten(in({2, 3, 4}), 4); }},
      {"dimshuffle: axis out of range", Kind::shape, {"dimshuffle", "axis 2", "(2, 3)"}, [] { dimshuffle(in({2, 3}), {0, 2}); }},
      {"dimshuffle: drops a long axis", Kind::shape, {"dimshuffle", "drops axis 0 of length 2"},
       [] { dimshuffle(in({2, 3}), {1}); }},
      {"dimshuffle: repeated axis", Kind::value, {"dimshuffle", "repeats axis 0"}, [] { dimshuffle(in({2, 3}), {0, 0}); }},
      {"transpose: wrong axis count", Kind::shape, {"transpose", "(1, 0)", "rank-3"}, [] { transpose(in({2, 3, 4}), {1, 0}); }},
      {"transpose: repeated axis", Kind::value, {"transpose", "(0, 0)", "axis 0"}, [] { transpose(in({2, 3}), {0, 0}); }},
      {"slice: axis out of range", Kind::shape, {"slice", "axis", "5"}, [] { slice(in({2, 3}), 5, 0, 1); }},
      {"slice: zero step", Kind::value, {"slice", "step", "0"}, [] { slice(in({2, 3}), 0, 0, 1, 0); }},
      {"slice: 0-d input", Kind::shape, {"slice", "0-d"}, [] { slice(in({}), 0, 0, 1); }},
      {"flip: axis twice", Kind::value, {"flip", "(0, 0)", "twice"}, [] { flip(in({2, 3}), {0, 0}); }},
      {"flip: axis out of range", Kind::shape, {"flip", "axis", "7"}, [] { flip(in({2, 3}), {7}); }},
      {"pad: negative amount", Kind::value, {"pad", "(-1, 0)", "negative"}, [] { pad(in({2, 3}), {{-1, 0}}); }},
      {"pad: too many pairs", Kind::shape, {"pad", "3 (pre, post) pairs", "(2, 3)"},
       [] { pad(in({2, 3}), {{1, 1}, {1, 1}, {1, 1}}); }},
      {"pad: size overflows", Kind::shape, {"pad", "4611686018427387905 * 4 bytes"},
       [] { pad(in({2}), {{(1LL << 62) - 1, 0}}); }},
      {"concatenate: no inputs", Kind::value, {"concatenate", "at least one input"}, [] { concatenate({}); }},
      {"concatenate: shapes differ", Kind::shape, {"concatenate", "input 1", "(2, 4)", "(2, 3)"},
       [] { concatenate({in({2, 3}), in({2, 4})}); }},
      {"concatenate: dtypes differ", Kind::type, {"concatenate", "input 1", "int32", "float32"},
       [] { concatenate({in({2, 3}), in({2, 3}, i32)}); }},
      {"concatenate: axis out of range", Kind::shape, {"concatenate", "axis", "5"}, [] { concatenate({in({2, 3})}, 5); }},
      {"concatenate: length overflows", Kind::shape, {"concatenate", "4611686018427387904 + 4611686018427387904"}, [] {
         Var b = in({1LL << 62}, DType::boolean);
         concatenate({b, b});
       }},
  };
}

std::vector<Case> math_cases() {
  return {
      {"add: shapes do not broadcast", Kind::shape, {"add", "(2, 3)", "(4,)"}, [] { in({2, 3}) + in({4}); }},
      {"mul: shapes do not broadcast", Kind::shape, {"mul", "(2, 3)", "(2,)"}, [] { in({2, 3}) * in({2}); }},
      {"log: integer input", Kind::type, {"log", "int32"}, [] { log(in({2}, i32)); }},
      // Reductions follow numpy (AxisError is a ValueError).
      {"sum: axis out of range", Kind::value, {"sum", "axis 5", "rank-2"}, [] { sum(in({2, 3}), {5}); }},
      {"mean: axis out of range", Kind::value, {"mean", "axis -5", "rank-2"}, [] { mean(in({2, 3}), {-5}); }},
      {"max: repeated axis", Kind::value, {"max", "repeated axis 0", "(0, 0)"}, [] { max(in({2, 3}), {0, 0}); }},
      {"min: repeated negative axis", Kind::value, {"min", "repeated axis 1", "(1, -1)"}, [] { min(in({2, 3}), {1, -1}); }},
      {"dot: inner dims differ", Kind::shape, {"matmul", "(2, 3)", "(4, 5)", "3 columns", "4 rows"},
       [] { dot(in({2, 3}), in({4, 5})); }},
      {"dot: 0-d operand", Kind::shape, {"matmul", "rank >= 1", "()", "(3,)"}, [] { dot(in({}), in({3})); }},
      {"matmul: inner dims differ", Kind::shape, {"matmul", "(2, 3)", "3 columns", "2 rows"},
       [] { matmul(in({2, 3}), in({2, 3})); }},
      {"dot: result overflows", Kind::shape, {"matmul", "2147483648 * 2147483648 * 4 bytes"}, [] {
         Var m = in({1LL << 31, 1});
         dot(m, transpose(m));
       }},
      {"cast: result overflows", Kind::shape, {"cast", "4611686018427387904 * 4"},
       [] { cast(in({1LL << 62}, DType::boolean), f32); }},
      {"sum_to: target of higher rank", Kind::shape, {"sum_to", "float32(2, 3)", "float32(3,)"},
       [] { sum_to(in({3}), in({2, 3})); }},
      {"broadcast_like: shapes do not broadcast", Kind::shape, {"broadcast_to", "(3,)", "(2, 4)", "3 vs 4"},
       [] { broadcast_like(in({3}), in({2, 4})); }},
      {"where: shapes do not broadcast", Kind::shape, {"where", "(3,)", "(4,)"},
       [] { where(in({3}, DType::boolean), in({3}), in({4})); }},
  };
}

std::vector<Case> nnet_cases() {
  return {
      {"softmax: 0-d input", Kind::shape, {"softmax", "x", "0-d"}, [] { softmax(in({})); }},
      {"softmax: integer input", Kind::type, {"softmax", "int32"}, [] { softmax(in({2, 3}, i32)); }},
      {"log_softmax: integer input", Kind::type, {"log_softmax", "int32"}, [] { log_softmax(in({2, 3}, i32)); }},
      {"categorical_crossentropy: shapes differ", Kind::shape, {"categorical_crossentropy", "(2, 3)", "(2, 4)"},
       [] { categorical_crossentropy(in({2, 3}), in({2, 4})); }},
      {"max_pool2d: rank 1", Kind::shape, {"max_pool2d", "(5,)"}, [] { max_pool2d(in({5})); }},
      {"max_pool2d: zero window", Kind::value, {"max_pool2d", "window", "(0, 2)"},
       [] { max_pool2d(in({1, 1, 4, 4}), {.window = {0, 2}, .stride = {}, .padding = {0, 0}}); }},
      {"max_pool2d: zero stride", Kind::value, {"max_pool2d", "stride", "(0, 1)"},
       [] { max_pool2d(in({1, 1, 4, 4}), {.window = {2, 2}, .stride = {0, 1}, .padding = {0, 0}}); }},
      {"max_pool2d: padding not below window", Kind::value, {"max_pool2d", "padding", "(2, 0)"},
       [] { max_pool2d(in({1, 1, 4, 4}), {.window = {2, 2}, .stride = {}, .padding = {2, 0}}); }},
      {"avg_pool2d: window larger than input", Kind::shape, {"avg_pool2d", "(3, 3)", "(1, 1, 2, 2)"},
       [] { avg_pool2d(in({1, 1, 2, 2}), {.window = {3, 3}, .stride = {}, .padding = {0, 0}}); }},
      {"max_pool2d_grad: gradient shape differs", Kind::shape, {"max_pool2d_grad", "(1, 1, 3, 3)", "(1, 1, 2, 2)"},
       [] { max_pool2d_grad(in({1, 1, 4, 4}), in({1, 1, 3, 3})); }},
      {"bilinear_upsampling: ratio 0", Kind::value, {"bilinear_upsampling", "ratio", "0"},
       [] { bilinear_upsampling(in({1, 1, 4, 4}), 0); }},
  };
}

std::vector<Case> conv_cases() {
  Var x = in({8, 3, 32, 32}, f32, "x");
  Var w = in({16, 3, 5, 5}, f32, "w");
  return {
      {"conv2d: input of rank 3", Kind::shape, {"conv2d", "'input'", "rank 4", "float32(8, 3, 32)"},
       [w] { conv2d(in({8, 3, 32}), w); }},
      {"conv2d: filters of rank 3", Kind::shape, {"conv2d", "'filters'", "rank 4", "float32(16, 3, 5)"},
       [x] { conv2d(x, in({16, 3, 5})); }},
      {"conv3d: 2-D operands", Kind::shape, {"conv3d", "'input'", "rank 5"}, [x, w] { conv3d(x, w); }},
      {"conv2d: dtypes differ", Kind::type, {"AbstractConv", "'input'", "float32", "'filters'", "float64"},
       [x] { conv2d(x, in({16, 3, 5, 5}, f64)); }},
      {"conv2d: integer operands", Kind::type, {"AbstractConv", "'input'", "int32"},
       [] { conv2d(in({1, 1, 4, 4}, i32), in({1, 1, 2, 2}, i32)); }},
      {"conv2d: zero stride", Kind::value, {"AbstractConv", "subsample", "(0, 1)"},
       [x, w] { conv2d(x, w, {.subsample = {0, 1}}); }},
      {"conv2d: stride of 3 entries", Kind::value, {"AbstractConv", "subsample", "2 entries", "(1, 1, 1)"},
       [x, w] { conv2d(x, w, {.subsample = {1, 1, 1}}); }},
      {"conv2d: zero dilation", Kind::value, {"AbstractConv", "filter_dilation", "(1, 0)"},
       [x, w] { conv2d(x, w, {.filter_dilation = {1, 0}}); }},
      {"conv2d: zero groups", Kind::value, {"AbstractConv", "num_groups", "got 0"},
       [x, w] { conv2d(x, w, {.num_groups = 0}); }},
      {"conv2d: groups do not divide channels", Kind::shape, {"AbstractConv", "input channels 3", "num_groups 2"},
       [x] { conv2d(x, in({16, 1, 5, 5}), {.num_groups = 2}); }},
      {"conv2d: channels differ", Kind::shape, {"AbstractConv", "channels mismatch", "(8, 3, 32, 32)", "(16, 4, 5, 5)"},
       [x] { conv2d(x, in({16, 4, 5, 5})); }},
      {"conv2d: unknown border mode", Kind::value, {"border_mode", "'sane'"}, [x, w] { conv2d(x, w, {.border_mode = "sane"}); }},
      {"conv2d: negative padding", Kind::value, {"AbstractConv", "border_mode", "(-1, 0)"},
       [x, w] { conv2d(x, w, {.border_mode = {-1, 0}}); }},
      {"conv2d: padding of 3 entries", Kind::value, {"AbstractConv", "border_mode", "(1, 1, 1)", "3"},
       [x, w] { conv2d(x, w, {.border_mode = {1, 1, 1}}); }},
      {"conv2d: output below 1", Kind::shape, {"AbstractConv", "spatial axis 0", "would be -1", "below 1"},
       [] { conv2d(in({1, 1, 3, 3}), in({1, 1, 5, 5})); }},
      {"conv2d: padding overflows", Kind::shape, {"AbstractConv", "overflows int64"}, [x, w] {
         conv2d(x, w, {.border_mode = BorderMode(std::numeric_limits<std::int64_t>::max())});
       }},
      {"conv2d: output bytes overflow", Kind::shape, {"AbstractConv", "bytes"}, [] {
         conv2d(in({1, 1, 1, 1}), in({1, 1, 1, 1}), {.border_mode = BorderMode(std::int64_t{1} << 30)});
       }},
      {"conv2d: filter_shape hint differs", Kind::shape, {"conv2d", "filter_shape", "(16, 3, 5, 3)"},
       [x, w] { conv2d(x, w, {.filter_shape = {16, 3, 5, 3}}); }},
      {"conv2d: input_shape hint of 3 entries", Kind::value, {"conv2d", "input_shape", "(4, 3, 20)", "4 entries"},
       [x, w] { conv2d(x, w, {.input_shape = {4, 3, 20}}); }},
      {"conv2d_grad_wrt_inputs: ambiguous at stride 2", Kind::shape, {"AbstractConvGradInputs", "input_shape", "ambiguous"},
       [] { conv2d_grad_wrt_inputs(in({8, 16, 14, 14}), in({16, 3, 5, 5}), {U, U, U, U}, {.subsample = {2, 2}}); }},
      {"conv2d_grad_wrt_inputs: target of 3 entries", Kind::value, {"conv2d_grad_wrt_inputs", "input_shape", "(8, 3, 32)"},
       [] { conv2d_grad_wrt_inputs(in({8, 16, 28, 28}), in({16, 3, 5, 5}), {8, 3, 32}); }},
      {"conv2d_grad_wrt_inputs: negative target entry", Kind::value, {"AbstractConvGradInputs", "input_shape", "-4"},
       [] { conv2d_grad_wrt_inputs(in({1, 1, 2, 2}), in({1, 1, 2, 2}), {1, 1, -4, 3}); }},
      {"conv2d_grad_wrt_inputs: input size below 1", Kind::shape,
       {"AbstractConvGradInputs", "spatial axis 0", "would be -9", "padding 5+5"},
       [] { conv2d_grad_wrt_inputs(in({1, 1, 1, 1}), in({1, 1, 1, 1}), {U, U, U, U}, {.border_mode = 5}); }},
      {"conv2d_grad_wrt_weights: filter size below 1", Kind::shape,
       {"AbstractConvGradWeights", "spatial axis 0", "would be -1", "input size 3", "output_grad size 5"},
       [] { conv2d_grad_wrt_weights(in({1, 1, 3, 3}), in({1, 1, 5, 5}), {U, U, U, U}); }},
      {"conv2d_grad_wrt_weights: output_grad disagrees", Kind::shape,
       {"AbstractConvGradWeights", "output_grad", "(8, 16, 27, 28)"},
       [x] { conv2d_grad_wrt_weights(x, in({8, 16, 27, 28}), {16, 3, 5, 5}); }},
      {"conv_fprop: stride of 3 entries", Kind::value, {"conv_fprop", "stride", "(1, 1, 1)"},
       [x, w] { conv_fprop(x, w, ConvAttributes().set_stride({1, 1, 1})); }},
      {"conv2d_fft: allow_fft false", Kind::value, {"conv2d_fft", "allow_fft"},
       [x, w] { conv2d_fft(x, w, {.allow_fft = false}); }},
      {"get_conv_output_shape: ranks differ", Kind::shape, {"get_conv_output_shape", "(1, 1, 3)", "(1, 1, 3, 3)"},
       [] { get_conv_output_shape({1, 1, 3}, {1, 1, 3, 3}, "valid", {}); }},
      {"conv_output_size: zero stride", Kind::value, {"conv_output_size", "subsample", "got 0"},
       [] { conv_output_size(5, 3, 0, 1, 0, 0); }},
      {"conv_output_size: dilation overflows", Kind::shape, {"conv_output_size", "dilated kernel", "overflows"},
       [] { conv_output_size(5, 3, 1, std::numeric_limits<std::int64_t>::max(), 0, 0); }},
      // Found by the conv fuzzer: a kernel of size 0 at dilation 2 has dilated extent -1, so
      // padded - extent is the largest int64 and the + 1 overflowed.
      {"conv_output_size: output size overflows", Kind::shape, {"conv_output_size", "output size", "overflows"},
       [] { conv_output_size(std::numeric_limits<std::int64_t>::max() - 1, 0, 1, 2, 0, 0); }},
      {"get_conv_gradweights_shape_1axis: filter size overflows", Kind::shape,
       {"get_conv_gradweights_shape_1axis", "filter size", "overflows"},
       [] { get_conv_gradweights_shape_1axis(std::numeric_limits<std::int64_t>::max(), 0, "valid", 0, 1, 1); }},
  };
}

// A small compiled function, x (2, ?) -> 2 x, for call checks.
Function small_function() {
  Var x = input(f32, {2, U}, "x");
  return compile({x}, {x * 2.0});
}

std::vector<Case> function_cases() {
  static const Function f = small_function();
  return {
      {"call: too many arguments", Kind::runtime, {"Function call", "expected 1 argument(s), got 2"},
       [] { f({Tensor::zeros(f32, {2, 3}), Tensor::zeros(f32, {2, 3})}); }},
      {"call: no arguments", Kind::runtime, {"Function call", "expected 1 argument(s), got 0"}, [] { f({}); }},
      {"call: wrong dtype", Kind::type, {"Function call", "argument 0 ('x')", "float64", "float32(2, ?)"},
       [] { f({Tensor::zeros(f64, {2, 3})}); }},
      {"call: wrong rank", Kind::shape, {"Function call", "argument 0 ('x')", "(2,)", "rank 1"},
       [] { f({Tensor::zeros(f32, {2})}); }},
      {"call: wrong dim", Kind::shape, {"Function call", "argument 0 ('x')", "(3, 3)", "axis 0"},
       [] { f({Tensor::zeros(f32, {3, 3})}); }},
      {"call: undefined tensor", Kind::value, {"Function call", "argument 0 ('x')", "undefined"}, [] { f({Tensor()}); }},
      {"call: conv shapes checked at run time", Kind::shape, {"AbstractConv", "channels", "(1, 2, 4, 4)"}, [] {
         Var x = input(f32, {1, U, 4, 4}, "x");
         Var w = input(f32, {1, 1, 2, 2}, "w");
         Function g = compile({x, w}, {conv2d(x, w)});
         g({Tensor::zeros(f32, {1, 2, 4, 4}), Tensor::zeros(f32, {1, 1, 2, 2})});
       }},
      {"call: size overflows at run time", Kind::shape, {"pad", "2305843009213693955 * 4 bytes"}, [] {
         Var x = input(f32, {U}, "x");
         Function g = compile({x}, {sum(pad(x, {{1LL << 61, 0}}))});
         g({Tensor::zeros(f32, {3})});
       }},
      {"call: intermediate cannot be allocated", Kind::memory, {"bytes"}, [] {
         Var x = input(f32, {U}, "x");
         Function g = compile({x}, {sum(pad(x, {{1LL << 46, 0}}))});
         g({Tensor::zeros(f32, {3})});
       }},
      {"call: assert_shape fails", Kind::runtime, {"(2, 5)", "(2, 3)"}, [] {
         Var x = input(f32, {2, U}, "x");
         Function g = compile({x}, {assert_shape(x, {2, 3}) * 1.0});
         g({Tensor::zeros(f32, {2, 5})});
       }},
      {"compile: abstract conv without optimizer", Kind::compile, {"AbstractConv"}, [] {
         Var x = input(f32, {1, 1, 4, 4}, "x");
         Var w = input(f32, {1, 1, 2, 2}, "w");
         compile({x, w}, {conv2d(x, w)}, Mode::none());
       }},
      {"compile: output needs a missing input", Kind::value, {"compile", "'y'"}, [] {
         Var x = input(f32, {2}, "x");
         Var y = input(f32, {2}, "y");
         compile({x}, {x + y});
       }},
  };
}

std::vector<Case> mode_cases() {
  return {
      {"flags: unknown flag", Kind::flag, {"unknown flag 'optimiser'", "optimizer"}, [] { Mode::from_flags("optimiser=None"); }},
      {"flags: unknown optimizer", Kind::flag, {"optimizer", "fast"}, [] { Mode::from_flags("optimizer=fast"); }},
      {"flags: threads not a number", Kind::flag, {"threads", "abc"}, [] { Mode::from_flags("threads=abc"); }},
      {"flags: threads above 1024", Kind::flag, {"threads", "4096"}, [] { Mode::from_flags("threads=4096"); }},
      {"flags: bad workspace_limit", Kind::flag, {"workspace_limit", "12QB"}, [] { Mode::from_flags("workspace_limit=12QB"); }},
      {"flags: bad profile", Kind::flag, {"profile", "maybe"}, [] { Mode::from_flags("profile=maybe"); }},
      {"flags: negative metaopt.budget", Kind::flag, {"metaopt.budget", "-1"}, [] { Mode::from_flags("metaopt.budget=-1"); }},
      {"flags: bad metaopt.verbose", Kind::flag, {"metaopt.verbose", "7"}, [] { Mode::from_flags("metaopt.verbose=7"); }},
      {"compile: Mode threads above 1024", Kind::value, {"ThreadPool", "1 to 1024", "5000"}, [] {
         Var x = input(f32, {2}, "x");
         Mode m;
         m.threads = 5000;
         compile({x}, {x * 2.0}, m);
       }},
      {"ThreadPool: negative size", Kind::value, {"ThreadPool", "got -3"}, [] { ThreadPool p(-3); }},
      {"CONVGRAPH_THREADS: not a number", Kind::value, {"CONVGRAPH_THREADS='abc'"}, [] { parse_thread_count("abc"); }},
      {"CONVGRAPH_THREADS: too large", Kind::value, {"CONVGRAPH_THREADS='100000'", "1 to 1024"},
       [] { parse_thread_count("100000"); }},
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto part : {tensor_cases(), graph_cases(), shape_op_cases(), math_cases(), nnet_cases(), conv_cases(),
                    function_cases(), mode_cases()})
    for (auto& c : part) all.push_back(std::move(c));
  return all;
}

}  // namespace

TEST_CASE("bad inputs: every row raises its Error subclass naming op, argument and values", "[core][errors][bad_inputs]") {
  const std::vector<Case> cases = all_cases();
  std::set<std::string> names;
  for (const auto& c : cases) {
    INFO(c.name);
    CHECK(names.insert(c.name).second);  // distinct rows
    CHECK(c.needles.size() >= 1);
    const std::string problem = check(c);
    CHECK(problem == "");
  }
  // Issue 9 asks for at least 80 distinct bad inputs across the public API.
  CHECK(cases.size() >= 100);
}
