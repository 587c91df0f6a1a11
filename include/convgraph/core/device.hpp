#pragma once
#include <cstdint>
#include <string_view>

namespace convgraph {

/// Where a tensor's storage lives and where a kernel runs.
enum class DeviceKind : std::uint8_t { cpu, cuda };
std::string_view device_name(DeviceKind d);  ///< "cpu" or "cuda"

}  // namespace convgraph
