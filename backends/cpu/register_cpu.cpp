// The CPU algorithm list. Call order is default priority (best first): the optimizer takes
// the first applicable one under the active tags. One line per algorithm; the reference
// stays last (tagged only "conv_reference", so fast_run never picks it).
#include "convgraph/backends/cpu/algorithms.hpp"

namespace convgraph {

void register_cpu_conv_algorithms(AlgorithmRegistry& r) {
  r.add(make_cpu_depthwise_algorithm());  // declines unless C/G == 1
  r.add(make_cpu_corrmm_algorithm());
  r.add(make_cpu_direct_algorithm());
  r.add(make_cpu_winograd_algorithm());
  r.add(make_cpu_fft_algorithm());
  r.add(make_cpu_conv3d2d_algorithm());
  r.add(make_cpu_reference_algorithm());
}

}  // namespace convgraph
