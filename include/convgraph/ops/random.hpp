#pragma once
/// Random streams (Theano's RandomStreams) and dropout. A RandomStream(seed) makes draw
/// nodes; each node yields new numbers on every call of a compiled function, and the same
/// sequence for the same seed. The numbers come from Philox4x32-10 (a counter-based
/// generator): element i of a node's k-th call is a pure function of (seed, the node's
/// index in its stream, k, i), so they do not depend on the thread count, on other
/// nodes, or on which Function runs the node. A node's call count is its state: it is
/// shared by every Function compiled from it and reset by seed(). Draw nodes are never
/// constant-folded and never merged with each other (two draws are two streams).
#include <cstdint>
#include <memory>
#include <optional>

#include "convgraph/core/graph.hpp"

namespace convgraph {

namespace detail {
struct StreamState;
}

class RandomStream {
 public:
  explicit RandomStream(std::uint64_t seed = 0);

  /// Reseeds: every draw made from this stream restarts its sequence (call count 0).
  void seed(std::uint64_t seed);
  std::uint64_t seed() const;

  /// Uniform on [low, high) (low <= high, both finite) of a fixed shape (every dimension
  /// known and >= 0), float32 or float64.
  Var uniform(Shape shape, double low = 0, double high = 1, DType dtype = DType::float32);
  /// Normal with mean `mean` and standard deviation `std` (finite, std >= 0), by
  /// Box-Muller from the same counter stream.
  Var normal(Shape shape, double mean = 0, double std = 1, DType dtype = DType::float32);
  /// 1 with probability p (0 <= p <= 1), else 0.
  Var bernoulli(Shape shape, double p = 0.5, DType dtype = DType::float32);

  /// The same draws shaped like `like` at run time (only its shape is read; no gradient
  /// flows to it). dtype: like's when it is float32/float64, float32 otherwise.
  Var uniform_like(const Var& like, double low = 0, double high = 1, std::optional<DType> dtype = {});
  Var normal_like(const Var& like, double mean = 0, double std = 1, std::optional<DType> dtype = {});
  Var bernoulli_like(const Var& like, double p = 0.5, std::optional<DType> dtype = {});

 private:
  std::shared_ptr<detail::StreamState> state_;
};

/// Inverted dropout: x * mask / (1 - p) with mask = stream.bernoulli_like(x, 1 - p), so
/// the expected value is x; the gradient is g * mask / (1 - p) (the same mask node).
/// x float32/float64, 0 <= p < 1 (ValueError otherwise); p = 0 returns x itself.
Var dropout(const Var& x, double p, RandomStream& stream);

}  // namespace convgraph
