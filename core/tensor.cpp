#include "convgraph/core/tensor.hpp"

#include "core/checked_math.hpp"
#include "core/dtype_dispatch.hpp"
#include "core/host_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <Eigen/Core>  // Eigen::half, Eigen::bfloat16

namespace convgraph {

std::string_view device_name(DeviceKind d) { return d == DeviceKind::cpu ? "cpu" : "cuda"; }

namespace {
// RAM + swap of this machine, or 0 when unknown: no single host allocation may exceed it.
std::size_t machine_memory_bytes() {
  static const std::size_t total = [] {
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return std::size_t{0};
    const unsigned long long unit = si.mem_unit ? si.mem_unit : 1;
    const unsigned long long ram = static_cast<unsigned long long>(si.totalram) * unit;
    const unsigned long long swap = static_cast<unsigned long long>(si.totalswap) * unit;
    return static_cast<std::size_t>(ram + swap);
  }();
  return total;
}

// Buffers from 4 MiB up are 2 MiB aligned and asked to be backed by transparent huge pages
// (madvise; a no-op where the kernel has THP off). The convolution kernels read such
// buffers row by row pages apart (transposing GEMM packs, im2col, Winograd transforms), and
// with 4 KiB pages each row is a TLB miss: Zen 4, 1 thread, sgemm 64x81x401408 with B
// stored transposed (c3d_conv1's grad weights) spent 27 of 140 Mcycles packing B on 4 KiB
// pages, 11 on 2 MiB pages. Smaller buffers keep 64-byte alignment (no 2 MiB rounding).
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kHugePagesFrom = std::size_t{4} << 20;
}  // namespace

std::shared_ptr<Storage> allocate_host(std::size_t bytes) {
  // Headroom for either rounding (64 bytes or 2 MiB) below: int64's max leaves plenty of size_t.
  if (bytes > static_cast<std::size_t>(detail::kMaxBytes) - 63)
    throw MemoryError(msg("allocate_host: cannot allocate ", bytes, " bytes (more than can be addressed)"));
  if (const std::size_t limit = machine_memory_bytes(); limit > 0 && bytes > limit)
    throw MemoryError(msg("allocate_host: cannot allocate ", bytes, " bytes (", static_cast<double>(bytes) / (1ull << 30),
                          " GiB): more than this machine's ", limit, " bytes of RAM + swap"));
  const bool huge = bytes >= kHugePagesFrom;
  const std::size_t align = huge ? kHugePage : 64;
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + align - 1) / align * align;
  std::shared_ptr<Storage> s;
  try {
    s = std::make_shared<Storage>();
    if (huge) s->deleter = [rounded](void* p) {
      if (!detail::host_cache().put(p, rounded)) std::free(p);
    };
    else s->deleter = [](void* p) { std::free(p); };
  } catch (const std::bad_alloc&) {
    throw MemoryError(msg("allocate_host: out of memory allocating the descriptor of a ", bytes, "-byte buffer"));
  }
  if (huge) s->data = detail::host_cache().take(rounded);
  if (!s->data) {
    s->data = std::aligned_alloc(align, rounded);
    if (!s->data && huge) {  // cached buffers of other sizes may be what is missing
      host_empty_cache();
      s->data = std::aligned_alloc(align, rounded);
    }
    if (!s->data) throw MemoryError(msg("allocate_host: could not allocate ", bytes, " bytes"));
    if (huge) (void)madvise(s->data, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
  }
  s->bytes = bytes;
  s->device = DeviceKind::cpu;
  return s;
}

std::int64_t numel(const Shape& s) { return detail::checked_numel(s, "numel"); }

std::string shape_to_string(const Shape& s) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) os << ", ";
    if (s[i] < 0) os << '?';
    else os << s[i];
  }
  if (s.size() == 1) os << ',';
  os << ')';
  return os.str();
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  std::int64_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc = detail::checked_mul(acc, s[i], "contiguous_strides", "the stride");
  }
  return st;
}

namespace {
// IEEE half and bfloat16 storage, converted through float on the host by Eigen's types
// (round to nearest even; NaN stays NaN, overflow becomes infinity).
float half_to_float(std::uint16_t h) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(h)); }
std::uint16_t float_to_half(float f) { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(f)); }
float bf16_to_float(std::uint16_t b) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(b)); }
std::uint16_t float_to_bf16(float f) { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(f)); }
}  // namespace

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  const std::size_t bytes = detail::checked_nbytes(shape_, dtype_, "Tensor");
  strides_ = contiguous_strides(shape_);
  try {
    storage_ = allocate_host(bytes);
  } catch (const MemoryError& e) {
    throw MemoryError(msg("Tensor: ", dtype_name(dtype_), shape_to_string(shape_), " needs ", bytes, " bytes; ", e.what()));
  }
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, std::int64_t offset)
    : storage_(std::move(storage)), dtype_(dtype), shape_(std::move(shape)), offset_(offset) {
  const std::size_t bytes = detail::checked_nbytes(shape_, dtype_, "Tensor");
  strides_ = contiguous_strides(shape_);
  if (offset_ < 0) throw ValueError(msg("Tensor: offset ", offset_, " into storage is negative"));
  const std::size_t need =
      detail::checked_bytes_add(detail::checked_bytes(offset_, dtype_size(dtype_), "Tensor", "the offset"), bytes,
                                "Tensor", "offset plus data");
  if (!storage_ || storage_->bytes < need)
    throw MemoryError(msg("Tensor: storage of ", storage_ ? storage_->bytes : 0, " bytes is too small for ",
                          dtype_name(dtype_), shape_to_string(shape_), " at offset ", offset_));
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::full(DType dtype, Shape shape, double value) {
  Tensor t(dtype, std::move(shape));
  t.fill(value);
  return t;
}

Tensor Tensor::from(const std::vector<double>& values, Shape shape, DType dtype) {
  Tensor t(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != t.numel())
    throw ShapeError(msg("Tensor::from: ", values.size(), " values do not fill shape ", shape_to_string(t.shape_)));
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return from({value}, {}, dtype); }

std::size_t Tensor::nbytes() const { return detail::checked_nbytes(shape_, dtype_, "Tensor::nbytes"); }

std::int64_t Tensor::dim(int axis) const {
  const int r = rank();
  const int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) throw ShapeError(msg("Tensor::dim: axis ", axis, " out of range for rank ", r));
  return shape_[static_cast<std::size_t>(a)];
}

DeviceKind Tensor::device() const { return storage_ ? storage_->device : DeviceKind::cpu; }

namespace {
// strides == contiguous_strides(shape), without building that vector (flat_offset asks on
// every element).
bool row_major_strides(const Shape& shape, const Shape& strides) {
  std::int64_t expect = 1;
  for (std::size_t a = shape.size(); a-- > 0;) {
    if (strides[a] != expect) return false;
    expect *= shape[a];
  }
  return true;
}
}  // namespace

bool Tensor::is_contiguous() const { return numel() <= 1 || row_major_strides(shape_, strides_); }

void* Tensor::raw() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

void Tensor::check_dtype(DType want) const {
  if (want != dtype_)
    throw TypeError(msg("Tensor: accessed as ", dtype_name(want), " but the tensor holds ", dtype_name(dtype_)));
}

std::int64_t Tensor::element_offset(std::initializer_list<std::int64_t> index) const {
  if (static_cast<int>(index.size()) != rank())
    throw ShapeError(msg("Tensor::at: ", index.size(), " indices for a rank-", rank(), " tensor"));
  std::int64_t off = 0;
  std::size_t i = 0;
  for (auto v : index) {
    if (v < 0 || v >= shape_[i])
      throw ShapeError(msg("Tensor::at: index ", v, " out of range for axis ", i, " of size ", shape_[i]));
    off += v * strides_[i++];
  }
  return off;
}

namespace {
// Offset of the i-th element in row-major order of a strided view.
std::int64_t strided_offset(std::int64_t i, const Shape& shape, const Shape& strides) {
  std::int64_t off = 0;
  for (std::size_t a = shape.size(); a-- > 0;) {
    off += (i % shape[a]) * strides[a];
    i /= shape[a];
  }
  return off;
}
}  // namespace

std::int64_t Tensor::flat_offset(const char* op, std::int64_t i) const {
  if (device() != DeviceKind::cpu) throw TypeError(msg(op, ": the tensor lives on a GPU; copy it to the host"));
  const std::int64_t n = numel();
  if (i < 0 || i >= n)
    throw ShapeError(msg(op, ": flat index ", i, " out of range for a tensor of ", n, " elements (shape ",
                         shape_to_string(shape_), ")"));
  return n <= 1 || row_major_strides(shape_, strides_) ? i : strided_offset(i, shape_, strides_);
}

double Tensor::get(std::int64_t i) const {
  const std::int64_t off = flat_offset("Tensor::get", i);
  const auto* p16 = static_cast<const std::uint16_t*>(raw());
  if (dtype_ == DType::float16) return half_to_float(p16[off]);
  if (dtype_ == DType::bfloat16) return bf16_to_float(p16[off]);
  return detail::dispatch_dtype(dtype_, "Tensor::get", [&](auto z) { return static_cast<double>(static_cast<decltype(z)*>(raw())[off]); });
}

void Tensor::set(std::int64_t i, double v) {
  const std::int64_t off = flat_offset("Tensor::set", i);
  auto* p16 = static_cast<std::uint16_t*>(raw());
  if (dtype_ == DType::float16) { p16[off] = float_to_half(static_cast<float>(v)); return; }
  if (dtype_ == DType::bfloat16) { p16[off] = float_to_bf16(static_cast<float>(v)); return; }
  detail::dispatch_dtype(dtype_, "Tensor::set", [&](auto z) {
    static_cast<decltype(z)*>(raw())[off] = static_cast<decltype(z)>(v);
    return 0;
  });
}

std::vector<double> Tensor::to_vector() const {
  std::vector<double> out;
  try {
    out.resize(static_cast<std::size_t>(numel()));
  } catch (const std::bad_alloc&) {
    throw MemoryError(msg("Tensor::to_vector: out of memory allocating ", numel(), " doubles (",
                          detail::checked_bytes(numel(), sizeof(double), "Tensor::to_vector", "the result"), " bytes)"));
  }
  for (std::int64_t i = 0, n = numel(); i < n; ++i) out[static_cast<std::size_t>(i)] = get(i);
  return out;
}

Tensor Tensor::reshape(Shape shape) const {
  int infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0)
        throw ShapeError(msg("Tensor::reshape: target shape ", detail::dims_text(shape), " has more than one -1"));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw ShapeError(msg("Tensor::reshape: target shape ", detail::dims_text(shape), " has a negative dimension ",
                           shape[i], " at axis ", i, " (only -1, for the one inferred dimension, is allowed)"));
    }
  }
  if (infer >= 0) {
    Shape rest = shape;
    rest[static_cast<std::size_t>(infer)] = 1;
    const std::int64_t known = detail::checked_numel(rest, "Tensor::reshape");
    if (known == 0 || numel() % known != 0)
      throw ShapeError(msg("Tensor::reshape: cannot reshape ", shape_to_string(shape_), " (", numel(), " elements) to ",
                           detail::dims_text(shape)));
    shape[static_cast<std::size_t>(infer)] = numel() / known;
  }
  // The byte-size rule too: an inferred 0 must not admit a shape no tensor could have.
  detail::checked_nbytes(shape, dtype_, "Tensor::reshape");
  if (detail::checked_numel(shape, "Tensor::reshape") != numel())
    throw ShapeError(msg("Tensor::reshape: cannot reshape ", shape_to_string(shape_), " (", numel(),
                         " elements) to ", shape_to_string(shape)));
  Tensor src = contiguous();
  Tensor v = src;
  v.shape_ = std::move(shape);
  v.strides_ = contiguous_strides(v.shape_);
  return v;
}

Tensor Tensor::permute(const std::vector<int>& axes) const {
  if (static_cast<int>(axes.size()) != rank())
    throw ShapeError(msg("Tensor::permute: ", axes.size(), " axes for a rank-", rank(), " tensor"));
  std::vector<bool> seen(axes.size(), false);
  Tensor v = *this;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const int a = axes[i];
    if (a < 0 || a >= rank() || seen[static_cast<std::size_t>(a)])
      throw ShapeError(msg("Tensor::permute: axes ", detail::dims_text(Shape(axes.begin(), axes.end())),
                           " must be a permutation of 0..", rank() - 1, " (axis ", a, " is ",
                           a < 0 || a >= rank() ? "out of range" : "repeated", ")"));
    seen[static_cast<std::size_t>(a)] = true;
    v.shape_[i] = shape_[static_cast<std::size_t>(a)];
    v.strides_[i] = strides_[static_cast<std::size_t>(a)];
  }
  return v;
}

Tensor Tensor::slice(int axis, std::int64_t begin, std::int64_t end, std::int64_t step) const {
  const int a = axis < 0 ? axis + rank() : axis;
  if (a < 0 || a >= rank()) throw ShapeError(msg("Tensor::slice: axis ", axis, " out of range for rank ", rank()));
  if (step < 1) throw ValueError(msg("Tensor::slice: step must be >= 1, got ", step));
  const auto ua = static_cast<std::size_t>(a);
  const std::int64_t n = shape_[ua];
  begin = std::clamp<std::int64_t>(begin < 0 ? begin + n : begin, 0, n);
  end = std::clamp<std::int64_t>(end < 0 ? end + n : end, 0, n);
  Tensor v = *this;
  // Written so that no step (up to INT64_MAX) overflows: with one element or none left the
  // stride is never used, and with two or more step < n keeps stride * step in the storage.
  v.shape_[ua] = end > begin ? (end - begin - 1) / step + 1 : 0;
  if (v.shape_[ua] > 1) v.strides_[ua] = strides_[ua] * step;
  // An empty view reads nothing, so its offset stays: an empty tensor's extents and strides
  // need not fit any storage (0 elements reshaped to (0, 1, 2^62)), and begin * stride
  // overflowed on one (the tensor fuzzer).
  if (std::find(v.shape_.begin(), v.shape_.end(), 0) == v.shape_.end()) v.offset_ += begin * strides_[ua];
  return v;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::astype(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t(dtype, shape_);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_)
    throw ShapeError(msg("Tensor::copy_from: source shape ", shape_to_string(src.shape_), " differs from ",
                         shape_to_string(shape_)));
  if (src.dtype_ == dtype_ && src.is_contiguous() && is_contiguous() && device() == DeviceKind::cpu &&
      src.device() == DeviceKind::cpu) {
    std::memcpy(raw(), src.raw(), nbytes());
    return;
  }
  for (std::int64_t i = 0, n = numel(); i < n; ++i) set(i, src.get(i));
}

void Tensor::fill(double value) {
  for (std::int64_t i = 0, n = numel(); i < n; ++i) set(i, value);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    throw ShapeError(msg("max_abs_diff: shapes ", shape_to_string(a.shape()), " and ", shape_to_string(b.shape()), " differ"));
  double m = 0;
  for (std::int64_t i = 0, n = a.numel(); i < n; ++i) {
    const double d = std::abs(a.get(i) - b.get(i));
    if (d > m || d != d) m = d != d ? INFINITY : d;
  }
  return m;
}

}  // namespace convgraph
