// Random draws (RandomStream) and dropout. A draw is a node with kernel key "random"
// (backends/cpu/random_kernels.cpp); its call count lives in the stream's state, which
// the op shares, so every Function compiled from the node advances one sequence.
#include "convgraph/ops/random.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <vector>

#include "convgraph/ops/math.hpp"
#include "ops/random_info.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph {

namespace detail {

/// What a RandomStream and its draw ops share: the seed and each draw's call count.
struct StreamState {
  std::mutex mu;
  std::uint64_t seed = 0;
  std::vector<std::uint64_t> calls;  ///< per draw key
  std::uint64_t serial = 0;          ///< process-unique: draws of two streams never compare equal
};

}  // namespace detail

namespace {

using detail::Distribution;
using detail::StreamState;

const char* const kDrawNames[] = {"uniform", "normal", "bernoulli"};

std::atomic<std::uint64_t> g_stream_serial{0};

class RandomOp final : public Op {
 public:
  RandomOp(std::shared_ptr<StreamState> s, std::uint32_t key, Distribution d, double a, double b, DType dtype,
           std::optional<Shape> shape)
      : state_(std::move(s)), key_(key), dist_(d), a_(a), b_(b), dtype_(dtype), shape_(std::move(shape)) {}

  std::string name() const override { return std::string("random_") + kDrawNames[static_cast<int>(dist_)]; }
  // The stream's serial and the draw's key make every draw op unequal to every other:
  // merge never joins two draws, whatever their other parameters.
  std::string params() const override {
    return msg("stream=", state_->serial, ",key=", key_, ",a=", a_, ",b=", b_, ",dtype=", dtype_name(dtype_),
               shape_ ? ",shape=" + shape_to_string(*shape_) : std::string(",like"));
  }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (shape_) {
      detail::check_arity(*this, in.size(), 0);
      return TensorType{dtype_, *shape_, DeviceKind::cpu};
    }
    detail::check_arity(*this, in.size(), 1);
    return TensorType{dtype_, in[0].shape, in[0].device};
  }
  // `like` gives only a shape: nothing flows back to it.
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var&) const override {
    return std::vector<Var>(in.size());
  }
  bool foldable() const override { return false; }  // new numbers on every call
  std::string_view kernel_key() const override { return "random"; }

  detail::RandomDraw next() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return {dist_, a_, b_, state_->seed, key_, state_->calls[key_]++};
  }

 private:
  std::shared_ptr<StreamState> state_;
  std::uint32_t key_;
  Distribution dist_;
  double a_, b_;
  DType dtype_;
  std::optional<Shape> shape_;  ///< fixed shape; none: the shape of the one input
};

void check_draw(Distribution d, double a, double b, DType dtype) {
  const char* op = kDrawNames[static_cast<int>(d)];
  detail::check_dtype(op, "dtype", dtype, {DType::float32, DType::float64});
  switch (d) {
    case Distribution::uniform:
      if (!std::isfinite(a) || !std::isfinite(b) || a > b)
        throw ValueError(msg(op, ": low ", a, " and high ", b, " must be finite with low <= high"));
      break;
    case Distribution::normal:
      if (!std::isfinite(a) || !std::isfinite(b) || b < 0)
        throw ValueError(msg(op, ": mean ", a, " and std ", b, " must be finite with std >= 0"));
      break;
    case Distribution::bernoulli:
      if (!(a >= 0 && a <= 1)) throw ValueError(msg(op, ": p ", a, " must be in [0, 1]"));
      break;
  }
}

}  // namespace

namespace detail {

RandomDraw next_draw(const Op& op) { return dynamic_cast<const RandomOp&>(op).next(); }

}  // namespace detail

RandomStream::RandomStream(std::uint64_t seed) : state_(std::make_shared<StreamState>()) {
  state_->seed = seed;
  state_->serial = g_stream_serial.fetch_add(1);
}

void RandomStream::seed(std::uint64_t s) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->seed = s;
  std::fill(state_->calls.begin(), state_->calls.end(), 0);
}

std::uint64_t RandomStream::seed() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->seed;
}

namespace {

// A new draw key of `state` (its index among the stream's draws).
std::uint32_t new_key(StreamState& state) {
  std::lock_guard<std::mutex> lock(state.mu);
  state.calls.push_back(0);
  return static_cast<std::uint32_t>(state.calls.size() - 1);
}

Var draw(const std::shared_ptr<StreamState>& s, Distribution d, Shape shape, double a, double b, DType dtype) {
  const char* op = kDrawNames[static_cast<int>(d)];
  for (auto n : shape)
    if (n < 0)
      throw ShapeError(msg(op, ": shape ", detail::ints_to_string(shape),
                           " must have every dimension known and >= 0 (use ", op, "_like for run-time shapes)"));
  check_draw(d, a, b, dtype);
  return convgraph::apply(std::make_shared<RandomOp>(s, new_key(*s), d, a, b, dtype, std::move(shape)), {});
}

Var draw_like(const std::shared_ptr<StreamState>& s, Distribution d, const Var& like, double a, double b,
              std::optional<DType> dtype) {
  const char* op = kDrawNames[static_cast<int>(d)];
  if (!like.defined()) throw ValueError(msg(op, "_like: undefined variable"));
  const DType t = dtype ? *dtype : (like.dtype() == DType::float64 ? DType::float64 : DType::float32);
  check_draw(d, a, b, t);
  return convgraph::apply(std::make_shared<RandomOp>(s, new_key(*s), d, a, b, t, std::nullopt), {like});
}

}  // namespace

Var RandomStream::uniform(Shape shape, double low, double high, DType dtype) {
  return draw(state_, Distribution::uniform, std::move(shape), low, high, dtype);
}
Var RandomStream::normal(Shape shape, double mean, double std, DType dtype) {
  return draw(state_, Distribution::normal, std::move(shape), mean, std, dtype);
}
Var RandomStream::bernoulli(Shape shape, double p, DType dtype) {
  return draw(state_, Distribution::bernoulli, std::move(shape), p, 0, dtype);
}
Var RandomStream::uniform_like(const Var& like, double low, double high, std::optional<DType> dtype) {
  return draw_like(state_, Distribution::uniform, like, low, high, dtype);
}
Var RandomStream::normal_like(const Var& like, double mean, double std, std::optional<DType> dtype) {
  return draw_like(state_, Distribution::normal, like, mean, std, dtype);
}
Var RandomStream::bernoulli_like(const Var& like, double p, std::optional<DType> dtype) {
  return draw_like(state_, Distribution::bernoulli, like, p, 0, dtype);
}

Var dropout(const Var& x, double p, RandomStream& stream) {
  if (!x.defined()) throw ValueError("dropout: x is an undefined variable");
  detail::check_dtype("dropout", "x", x.dtype(), {DType::float32, DType::float64});
  if (!(p >= 0 && p < 1)) throw ValueError(msg("dropout: p ", p, " must be in [0, 1)"));
  if (p == 0) return x;
  const Var mask = stream.bernoulli_like(x, 1 - p, x.dtype());
  return x * mask / (1 - p);
}

}  // namespace convgraph
