#pragma once
/// The blocked activation layout (NCHW16c and its 1-D and 3-D forms): channels split into
/// blocks of `block` that become the innermost axis, so a vector of one pixel's channels is
/// one contiguous load. The optimizer's blocked_layout pass keeps the activations between
/// consecutive convolutions in this form (optimizer/blocked_layout.cpp); these are its
/// conversions, usable directly too. Padded channels are zero.
#include <cstdint>

#include "convgraph/core/graph.hpp"

namespace convgraph {

/// (N, C, spatial...) -> (N, ceil(C / block), spatial..., block): element (n, c, s) goes to
/// (n, c / block, s, c % block); the channels past C in the last block are zero. Rank >= 2,
/// float32 or float64; block in [1, 256] (ValueError naming the op, the argument, the value).
/// Its gradient is from_blocked(g, C).
Var to_blocked(const Var& x, std::int64_t block = 16);
/// The inverse: (N, Cb, spatial..., block) -> (N, channels, spatial...), with
/// (Cb - 1) * block < channels <= Cb * block; the padded channels are dropped. Its gradient
/// is to_blocked(g, block).
Var from_blocked(const Var& x, std::int64_t channels);

}  // namespace convgraph
