#include "fakes.hpp"

#include <unistd.h>

#include <atomic>
#include <filesystem>

namespace convgraph::testing {

TempPath::TempPath(const std::string& stem) {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path() /
                   ("convgraph_opt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  path = (dir / stem).string();
}

TempPath::~TempPath() {
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(path).parent_path(), ec);
}

}  // namespace convgraph::testing
