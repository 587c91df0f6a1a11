#include "optimizer/text_util.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace convgraph {

std::vector<std::string> split_text(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string trim_text(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

namespace {
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(1, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string join_text(const std::vector<std::string>& items, std::string_view sep) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) s += sep;
    s += items[i];
  }
  return s;
}

std::string seconds_text(double s) {
  char buf[64];
  // Thresholds just below the unit so 0.99999999e-3 (a difference of clock readings)
  // prints as "1.000 ms", not "1000.0 us".
  if (s >= 0.9995) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 0.9995e-3) std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

std::string bytes_text_iec(double bytes) {
  char buf[64];
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else if (bytes < 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024);
  else if (bytes < 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace convgraph
