#pragma once
// Small text helpers shared by the flag parser, the rewrite database and the tuning cache.
#include <string>
#include <string_view>
#include <vector>

namespace convgraph {

/// Splits on `sep`, keeping empty fields ("a::b" -> {"a", "", "b"}).
std::vector<std::string> split_text(std::string_view s, char sep);
/// Strips leading and trailing whitespace.
std::string trim_text(std::string_view s);
/// The candidate nearest to `word` by edit distance when it is close enough to be a
/// plausible typo (distance <= max(1, |word| / 3)); empty otherwise.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);
/// "a, b, c".
std::string join_text(const std::vector<std::string>& items, std::string_view sep = ", ");
/// "1.23 ms", "4.5 s", "17 us": seconds in a readable unit.
std::string seconds_text(double s);
/// "0 B", "12.0 KiB", "3.5 MiB".
std::string bytes_text_iec(double bytes);

}  // namespace convgraph
