#pragma once
// Private: backslash-escapes quotes and backslashes, as both DOT labels and JSON strings
// require.
#include <string>

namespace convgraph::detail {

inline std::string escape_quotes(const std::string& s) {
  std::string r;
  r.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r;
}

}  // namespace convgraph::detail
