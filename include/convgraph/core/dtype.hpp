#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace convgraph {

enum class DType : std::uint8_t { float16, bfloat16, float32, float64, int32, int64, boolean };

/// Bytes per element.
std::size_t dtype_size(DType t);
/// "float32", "int64", "bool", ...
std::string_view dtype_name(DType t);
/// Parses a dtype name; throws ValueError listing the valid names.
DType parse_dtype(std::string_view name);
bool is_float(DType t);
bool is_integer(DType t);
/// The dtype numpy-style promotion gives a binary op on a and b.
DType promote(DType a, DType b);

/// Maps a C++ type to its DType (float, double, int32_t, int64_t, bool).
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::float32; }
template <> constexpr DType dtype_of<double>() { return DType::float64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::int32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::int64; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

}  // namespace convgraph
