#pragma once
// Private: the ops of the blocked activation layout (ops/blocked_layout.cpp), for the
// blocked_layout pass that builds them (optimizer/blocked_layout.cpp) and the CPU kernels
// that run them (backends/cpu/blocked_kernels.cpp). A blocked tensor is
// (N, ceil(C / B), spatial..., B); its padded channels are zero, and every op here keeps
// them zero (so a later convolution, pooling or from_blocked never sees anything else).
#include <cstdint>
#include <memory>

#include "convgraph/ops/abstract_conv.hpp"
#include "ops/pool_internal.hpp"

namespace convgraph::detail {

/// The block of the blocked convolution and pooling: one AVX-512 vector of float32.
inline constexpr std::int64_t kConvBlock = 16;
/// Output channels a blocked convolution computes together (a register tile's width);
/// its packed weights are padded to a multiple of it.
inline constexpr std::int64_t kConvBlockUnit = 64;

/// Block of a to_blocked op (kernel key "to_blocked"), channels of a from_blocked op
/// ("from_blocked").
std::int64_t to_blocked_block(const Op& op);
std::int64_t from_blocked_channels(const Op& op);

/// A forward convolution on blocked tensors (kernel key "blocked_conv", float32, one
/// group): inputs (x blocked (N, ceil(C/16), in..., 16), w (K, C, kernel...)[, bias (K,)]
/// [, residual blocked like y]), output (N, ceil(K/16), out..., 16), computing
/// relu?((conv(x, w) + bias) + residual) - the parts of ConvEpilogue - in registers.
/// The weights are repacked on each call (workspace_bytes), a small pass over K*C*k^d.
class BlockedConvOp final : public Op {
 public:
  struct Epilogue {
    bool bias = false, residual = false, relu = false;
  };
  /// `channels`: C, the logical input channels (the blocked x only says ceil(C/16)).
  /// `why`: how the layout pass chose it (shown by describe()).
  BlockedConvOp(std::shared_ptr<const AbstractConvOp> abstract, std::int64_t channels, Epilogue epilogue,
                std::string why = {});
  std::string name() const override;  ///< "BlockedConv", "BlockedConv+bias+relu", ...
  std::string params() const override;
  TensorType infer(const std::vector<TensorType>& inputs) const override;
  std::size_t workspace_bytes(const std::vector<TensorType>& inputs) const override;
  std::string_view kernel_key() const override { return "blocked_conv"; }
  std::string implementation() const override;
  bool foldable() const override { return false; }

  const AbstractConvOp& abstract() const { return *abstract_; }
  const Epilogue& epilogue() const { return epilogue_; }
  std::int64_t channels() const { return channels_; }
  /// The logical (NCHW) problem for the op's concrete input types.
  ConvProblem problem(const std::vector<TensorType>& inputs) const;

 private:
  TensorType logical_x(const TensorType& xb) const;
  std::shared_ptr<const AbstractConvOp> abstract_;
  std::int64_t channels_;
  Epilogue epilogue_;
  std::string why_;
};

/// Packed-weight floats of a blocked convolution: [K/64][C/16][taps][16][64], then the bias
/// padded to whole units; the workspace holds both.
std::int64_t blocked_conv_workspace_floats(const ConvProblem& p);

/// Max or average pooling of a blocked tensor over its spatial axes (kernel key
/// "blocked_pool"); the same PoolParams as the NCHW op, so the same windows and divisors.
class BlockedPoolOp final : public Op {
 public:
  explicit BlockedPoolOp(PoolParams p) : p_(p) {}
  std::string name() const override { return "blocked_" + p_.op_name(); }
  std::string params() const override { return p_.text(); }
  TensorType infer(const std::vector<TensorType>& inputs) const override;
  std::string_view kernel_key() const override { return "blocked_pool"; }
  const PoolParams& pool_params() const { return p_; }

 private:
  PoolParams p_;
};

}  // namespace convgraph::detail
