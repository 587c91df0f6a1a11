#pragma once
/// How the processes of a data-parallel job agree on the meta-optimizer's choices, so that
/// every rank runs the same convolution algorithms (timings differ between processes, and
/// so would their winners). dist::init() installs an agreement that lets rank 0 decide and
/// broadcasts its answer; without one, each process decides alone.
#include <functional>
#include <string>

namespace convgraph {

/// Called once per convolution node the meta-optimizer lowers, in graph order, and once
/// per blocked-layout region it times (after the convolutions, in graph order), with
/// `decide`, which tunes the node or region in this process (cache lookup, timing, cache
/// update) and returns the choice as text ("" when nothing could be timed). Returns the text every
/// process must use: rank 0's. Every process must reach the same calls in the same order
/// (compile the same graphs with the same flags on every rank).
using TuningAgreement = std::function<std::string(const std::function<std::string()>& decide)>;

/// Installs `agreement` for every later compile() in this process; an empty one removes it.
void set_tuning_agreement(TuningAgreement agreement);
/// The installed agreement (empty when none).
TuningAgreement tuning_agreement();

}  // namespace convgraph
