#pragma once
/// What compile() records about the optimizer's work (Function::compile_stats()).
#include <string>
#include <utility>
#include <vector>

namespace convgraph {

struct CompileStats {
  double total_seconds = 0;
  std::vector<std::pair<std::string, double>> pass_seconds;  ///< in pass order
  std::vector<std::string> notes;  ///< optimizer notes (meta-optimizer decisions...)
};

}  // namespace convgraph
