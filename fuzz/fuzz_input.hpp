#pragma once
// Shared by the fuzz targets: a small FuzzedDataProvider (g++ has no
// <fuzzer/FuzzedDataProvider.h>, and the targets also build with g++ for the replay test)
// and the failure report. Reading past the end of the input yields zeros, so every input
// decodes to some case.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>

#include "convgraph/core/error.hpp"

namespace convgraph::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::size_t left() const { return size_ - pos_; }
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool flag() { return (byte() & 1) != 0; }
  /// One of n choices (n >= 1).
  std::size_t choice(std::size_t n) { return byte() % n; }
  /// sizeof(T) bytes, little-endian (T an integer type).
  template <class T>
  T raw() {
    std::make_unsigned_t<T> v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<std::make_unsigned_t<T>>(byte()) << (8 * i);
    return static_cast<T>(v);
  }
  /// Mostly a small value in [lo, hi]; sometimes a boundary value (0, -1, 2^31, 2^62,
  /// INT64_MIN, ...) or 8 raw bytes, to reach the overflow and negative-size paths.
  std::int64_t number(std::int64_t lo, std::int64_t hi) {
    static constexpr std::int64_t kEdges[] = {0,
                                              -1,
                                              -2,
                                              1,
                                              46341,        // sqrt(2^31)
                                              3037000500,   // sqrt(2^63)
                                              std::int64_t{1} << 31,
                                              (std::int64_t{1} << 31) - 1,
                                              std::int64_t{1} << 32,
                                              std::int64_t{1} << 62,
                                              std::numeric_limits<std::int64_t>::max(),
                                              std::numeric_limits<std::int64_t>::max() / 2,
                                              std::numeric_limits<std::int64_t>::min(),
                                              std::numeric_limits<std::int64_t>::min() + 1};
    const std::uint8_t b = byte();
    if (b < 224) return lo + static_cast<std::int64_t>(b % static_cast<std::uint64_t>(hi - lo + 1));
    if (b < 248) return kEdges[b % std::size(kEdges)];
    return raw<std::int64_t>();
  }
  /// A string of up to `max` bytes (length byte first).
  std::string text(std::size_t max) {
    const std::size_t n = std::min<std::size_t>(byte(), max);
    std::string s;
    for (std::size_t i = 0; i < n && left() > 0; ++i) s.push_back(static_cast<char>(byte()));
    return s;
  }
  /// Everything not read yet.
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return s;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// A violated property: report it and abort, so libFuzzer saves the input as a crash and
/// the replay test fails.
[[noreturn]] inline void fail(const char* file, int line, const char* cond, const std::string& what) {
  std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n  %s\n", file, line, cond, what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace convgraph::fuzz

/// FUZZ_CHECK(cond, parts...): parts are streamed into the failure message.
#define FUZZ_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) ::convgraph::fuzz::fail(__FILE__, __LINE__, #cond, ::convgraph::msg(__VA_ARGS__)); \
  } while (0)
