#pragma once
// Private: UTF-8 well-formedness, for writers of text formats that reject anything else
// (Graphviz labels, XML).
#include <cstddef>
#include <string_view>

namespace convgraph::detail {

/// Length of the well-formed UTF-8 sequence `s` starts with (RFC 3629: no overlong forms,
/// no surrogates, at most U+10FFFF), 0 when it is not one (or `s` is empty).
inline std::size_t utf8_length(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  const std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (n == 0 || c > 0xf4 || s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i)
    if ((b(i) & 0xc0) != 0x80) return 0;
  if ((c == 0xe0 && b(1) < 0xa0) || (c == 0xed && b(1) > 0x9f) || (c == 0xf0 && b(1) < 0x90) ||
      (c == 0xf4 && b(1) > 0x8f))
    return 0;
  return n;
}

}  // namespace convgraph::detail
