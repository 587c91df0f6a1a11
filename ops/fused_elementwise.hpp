#pragma once
// Private: the fused elementwise op built by the fusion pass (optimizer/fusion.cpp). It
// holds a straight-line program over registers: registers 0..inputs-1 are the node's
// inputs (broadcast to the output shape), instruction k writes register inputs+k, and the
// last instruction is the result.
#include <cstdint>
#include <string>
#include <vector>

#include "ops/elementwise_info.hpp"

namespace convgraph::detail {

struct FusedInstr {
  enum class Code : std::uint8_t { constant, unary, binary, where, cast };
  Code code = Code::constant;
  UnaryKind unary = UnaryKind::neg;
  BinaryKind binary = BinaryKind::add;
  DType dtype = DType::float32;  ///< of the result register
  int a = -1, b = -1, c = -1;    ///< operand registers; where: a ? b : c
  double value = 0;              ///< constants: splatted in `dtype`
  double param[2] = {0, 0};      ///< unary: the row's scalar parameters (leaky_relu's alpha, clip's lo and hi)
};

struct FusedProgram {
  std::vector<DType> inputs;  ///< dtype of each input register
  std::vector<FusedInstr> code;

  int registers() const { return static_cast<int>(inputs.size() + code.size()); }
  DType reg_dtype(int r) const;
  /// Instructions that are ops of the original graph (not constants).
  int op_count() const;
  /// Checks operand registers and dtypes (ValueError/TypeError naming the instruction).
  void validate() const;
  /// Canonical text: "t0=exp(i0); t0*i1+0.5 [float32,float32]". Equal texts mean equal
  /// programs, so it is the op's params().
  std::string text() const;
};

/// The op; validates the program.
OpPtr make_fused_elementwise(FusedProgram program);
/// The program of a fused op, or nullptr for any other op.
const FusedProgram* fused_program(const Op& op);

}  // namespace convgraph::detail
