#pragma once
/// convgraph's error contract: every bad input throws a convgraph::Error
/// subclass whose message names the op, the argument and the values.
/// "Not applicable" answers (an algorithm declining a problem) are not errors:
/// they are Status values carrying a reason.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace convgraph {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};
/// Wrong dtype, or an argument that is not a tensor of the expected kind.
class TypeError : public Error { using Error::Error; };
/// Wrong rank, mismatched dimensions, an output size below 1.
class ShapeError : public Error { using Error::Error; };
/// A parameter with a bad value (negative padding, zero stride, ...).
class ValueError : public Error { using Error::Error; };
/// An unknown flag or flag value.
class FlagError : public Error { using Error::Error; };
/// A graph the optimizer cannot turn into kernels (no implementation applies).
class CompileError : public Error { using Error::Error; };
/// A failure while a compiled function runs (bad call arguments, a check node).
class RuntimeError : public Error { using Error::Error; };
/// Workspace or allocation requests that cannot be served.
class MemoryError : public Error { using Error::Error; };
/// A CUDA, cuDNN, cuBLAS or cuFFT call failed (or no GPU is present).
class DeviceError : public Error { using Error::Error; };
/// A mismatch found by DebugMode between an implementation and the reference.
class MismatchError : public Error { using Error::Error; };

/// Builds a message from streamable parts: msg("conv2d: ", "stride ", s).
template <class... Parts>
std::string msg(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

/// Result of an applicability check: ok, or the reason why not.
class [[nodiscard]] Status {
 public:
  static Status ok() { return Status(); }
  static Status no(std::string reason) { return Status(std::move(reason)); }
  bool is_ok() const { return reason_.empty(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& reason() const { return reason_; }

 private:
  Status() = default;
  explicit Status(std::string r) : reason_(r.empty() ? "unspecified" : std::move(r)) {}
  std::string reason_;
};

}  // namespace convgraph
