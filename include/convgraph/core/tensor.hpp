#pragma once
/// Tensor: a typed, shaped, strided view of reference-counted storage. Host storage is
/// 64-byte aligned. Views (reshape of contiguous data, transpose, slice) share storage.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "convgraph/core/device.hpp"
#include "convgraph/core/dtype.hpp"
#include "convgraph/core/error.hpp"

namespace convgraph {

using Shape = std::vector<std::int64_t>;
/// A dimension whose size is not known when the graph is built (Theano's None).
inline constexpr std::int64_t kUnknown = -1;

/// A block of memory on one device, freed by its deleter.
struct Storage {
  void* data = nullptr;
  std::size_t bytes = 0;
  DeviceKind device{};
  std::function<void(void*)> deleter;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (data && deleter) deleter(data);
  }
};

/// Allocates `bytes` of 64-byte aligned host memory (from 4 MiB up: 2 MiB aligned and
/// advised onto transparent huge pages, which the kernels' strided reads want). Throws
/// MemoryError naming the bytes when the request cannot succeed: the allocator fails, or it
/// exceeds this machine's RAM + swap (refused up front, so an overcommitting kernel cannot
/// OOM-kill us later).
std::shared_ptr<Storage> allocate_host(std::size_t bytes);

/// Large host buffers (4 MiB up) are cached when freed and handed out again at the same
/// size, so a loop that frees its outputs and asks for them again does not fault and zero
/// fresh pages on every call. The cache holds at most CONVGRAPH_HOST_CACHE_MB megabytes
/// (read on first use; 0 turns it off; unset: an eighth of the RAM, at most 4 GiB), the
/// oldest buffers freed past that.
struct HostCacheStats {
  std::size_t bytes_cached = 0;    ///< held for reuse now
  std::size_t buffers_cached = 0;
  std::size_t limit_bytes = 0;
  std::uint64_t hits = 0, misses = 0;  ///< large allocations served from the cache, or not
};
HostCacheStats host_cache_stats();
/// Frees every cached buffer (memory in use is untouched).
void host_empty_cache();
/// CONVGRAPH_HOST_CACHE_MB's value in megabytes; ValueError naming it and the value when it
/// is not a decimal integer from 0 to 2^20.
std::size_t parse_host_cache_mb(std::string_view text);

/// Element count of a concrete shape; ShapeError for a negative dimension or a shape whose
/// element count does not fit in int64.
std::int64_t numel(const Shape& s);
std::string shape_to_string(const Shape& s);
Shape contiguous_strides(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  /// Uninitialised contiguous host tensor. ShapeError for a negative dimension or a shape
  /// whose byte size overflows; MemoryError when the memory cannot be allocated.
  Tensor(DType dtype, Shape shape);
  /// Wraps existing storage (e.g. device memory) as a contiguous tensor.
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, std::int64_t offset = 0);

  static Tensor zeros(DType dtype, Shape shape);
  static Tensor full(DType dtype, Shape shape, double value);
  /// A host tensor holding `values` (converted to `dtype`) with the given shape.
  static Tensor from(const std::vector<double>& values, Shape shape, DType dtype = DType::float32);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape) {
    Tensor t(dtype_of<T>(), std::move(shape));
    if (static_cast<std::int64_t>(values.size()) != t.numel())
      throw ShapeError(msg("Tensor::from_vector: ", values.size(), " values for shape ", shape_to_string(t.shape())));
    for (std::size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
    return t;
  }
  /// 1-D tensor from a brace list: Tensor::of({1.f, 2.f}).
  template <class T>
  static Tensor of(std::initializer_list<T> values) {
    return from_vector(std::vector<T>(values), {static_cast<std::int64_t>(values.size())});
  }
  /// A 0-d tensor.
  static Tensor scalar(double value, DType dtype = DType::float32);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  ///< in elements
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int axis) const;  ///< negative axes count from the end
  std::int64_t numel() const { return convgraph::numel(shape_); }
  std::size_t nbytes() const;
  DeviceKind device() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::int64_t offset() const { return offset_; }

  /// Pointer to the first element (respecting the view's offset).
  void* raw() const;
  template <class T>
  T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw());
  }

  /// Element access for tests and small host code (any rank, any layout).
  template <class T>
  T& at(std::initializer_list<std::int64_t> index) const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw())[element_offset(index)];
  }
  /// The element at flat row-major position i, converted to double (any host dtype).
  double get(std::int64_t i) const;
  void set(std::int64_t i, double v);
  /// All elements in row-major order as doubles.
  std::vector<double> to_vector() const;

  // ---- views (share storage) ----
  /// View if contiguous, else a copy. At most one -1 (inferred); other dims must be >= 0.
  Tensor reshape(Shape shape) const;
  Tensor permute(const std::vector<int>& axes) const;
  Tensor slice(int axis, std::int64_t begin, std::int64_t end, std::int64_t step = 1) const;
  // ---- copies ----
  Tensor contiguous() const;  ///< this if already contiguous
  Tensor clone() const;       ///< always a fresh contiguous copy
  Tensor astype(DType dtype) const;
  /// Copies values from `src` (same shape, any layout; dtype converted) into this view.
  void copy_from(const Tensor& src);
  void fill(double value);

 private:
  void check_dtype(DType want) const;
  /// Storage offset of flat row-major element i; TypeError off the host, ShapeError unless 0 <= i < numel().
  std::int64_t flat_offset(const char* op, std::int64_t i) const;
  std::int64_t element_offset(std::initializer_list<std::int64_t> index) const;
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::float32;
  Shape shape_;
  Shape strides_;
  std::int64_t offset_ = 0;
};

/// Largest |a - b| over all elements (same shape); for tests and DebugMode.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace convgraph
