#include "convgraph/core/dtype.hpp"

#include "convgraph/core/error.hpp"

namespace convgraph {

namespace {
constexpr std::string_view kNames[] = {"float16", "bfloat16", "float32", "float64",
                                       "int32",   "int64",    "bool"};
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::float16:
    case DType::bfloat16: return 2;
    case DType::float32:
    case DType::int32: return 4;
    case DType::float64:
    case DType::int64: return 8;
    case DType::boolean: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) { return kNames[static_cast<int>(t)]; }

DType parse_dtype(std::string_view name) {
  for (int i = 0; i < 7; ++i)
    if (kNames[i] == name) return static_cast<DType>(i);
  if (name == "half") return DType::float16;
  if (name == "float") return DType::float32;
  if (name == "double") return DType::float64;
  throw ValueError(msg("unknown dtype '", name,
                       "'; valid: float16, bfloat16, float32, float64, int32, int64, bool"));
}

bool is_float(DType t) {
  return t == DType::float16 || t == DType::bfloat16 || t == DType::float32 || t == DType::float64;
}
bool is_integer(DType t) { return t == DType::int32 || t == DType::int64; }

DType promote(DType a, DType b) {
  if (a == b) return a;
  // Rank: bool < int32 < int64 < float16/bfloat16 < float32 < float64.
  auto rank = [](DType t) {
    switch (t) {
      case DType::boolean: return 0;
      case DType::int32: return 1;
      case DType::int64: return 2;
      case DType::float16:
      case DType::bfloat16: return 3;
      case DType::float32: return 4;
      case DType::float64: return 5;
    }
    return 0;
  };
  if (rank(a) == 3 && rank(b) == 3) return DType::float32;  // float16 with bfloat16
  // Integers with half floats stay half, as numpy does for float16 with int8; we widen.
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace convgraph
