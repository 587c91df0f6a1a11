// Fuzz target: Tensor construction, reshape, permute and slicing (core/tensor.cpp).
//
// The input builds a tensor (any dtype and rank, shapes with zero, negative and huge dims,
// wrapped storage with an offset) and then applies a sequence of operations: reshape
// (with -1), permute, slice (any begin/end/step), contiguous, clone, astype, copy_from,
// fill, set, at, dim. A plain row-major model (shape + values) follows along; after every
// operation the tensor must hold exactly the model's values. Rejections must be
// convgraph::Errors, and operations the semantics allow must not be rejected.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "convgraph/core/tensor.hpp"
#include "fuzz/fuzz_input.hpp"

using namespace convgraph;

namespace {

using i64 = std::int64_t;
__extension__ typedef __int128 Wide;

constexpr i64 kMaxElements = 4096;
constexpr std::size_t kMaxBytes = std::size_t{1} << 20;

/// CONVGRAPH_FUZZ_VERBOSE=1: print every operation (to turn a crash input into a report).
bool verbose() {
  static const bool on = std::getenv("CONVGRAPH_FUZZ_VERBOSE") != nullptr;
  return on;
}

constexpr DType kDTypes[] = {DType::float16, DType::bfloat16, DType::float32, DType::float64,
                             DType::int32,   DType::int64,    DType::boolean};

struct Model {
  Shape shape;
  std::vector<double> values;  // row-major
};

/// numel; nullopt when a dim is negative or the product leaves int64.
std::optional<i64> checked_numel(const Shape& s) {
  i64 n = 1;
  for (i64 d : s)
    if (d < 0) return std::nullopt;
  for (i64 d : s)
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

/// The library's size rule (core/checked_math.hpp): no negative dim, and the product of
/// the non-zero dims times the item size fits in int64 (so every stride and byte offset
/// does too). Shapes breaking it must be refused; shapes keeping it must not.
bool size_ok(const Shape& s, std::size_t item) {
  Wide p = static_cast<Wide>(item);
  for (i64 d : s) {
    if (d < 0) return false;
    if (d > 0 && (p *= d) > Wide(std::numeric_limits<i64>::max())) return false;
  }
  return true;
}

double stored(DType t, double v) {
  if (t == DType::boolean) return v != 0 ? 1.0 : 0.0;
  return v;  // small integers are exact in every other dtype
}

double small_value(fuzz::Input& in) { return static_cast<double>(static_cast<int>(in.byte() % 9) - 4); }

Shape decode_shape(fuzz::Input& in, i64 lo, i64 hi) {
  Shape s;
  for (std::size_t r = in.choice(6); r > 0; --r) s.push_back(in.number(lo, hi));
  return s;
}

std::vector<i64> strides_of(const Shape& s) {
  std::vector<i64> st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

/// Multi-index of flat position i in shape s.
std::vector<i64> unflatten(i64 i, const Shape& s) {
  std::vector<i64> idx(s.size());
  for (std::size_t a = s.size(); a-- > 0;) {
    idx[a] = i % s[a];
    i /= s[a];
  }
  return idx;
}

void expect_model(const Tensor& t, const Model& m, const char* after) {
  FUZZ_CHECK(t.shape() == m.shape, after, ": shape ", shape_to_string(t.shape()), ", expected ",
             shape_to_string(m.shape));
  FUZZ_CHECK(t.numel() == static_cast<i64>(m.values.size()), after, ": numel ", t.numel(), ", expected ",
             m.values.size());
  FUZZ_CHECK(t.strides().size() == t.shape().size(), after, ": ", t.strides().size(), " strides for rank ",
             t.rank());
  const std::vector<double> v = t.to_vector();
  for (std::size_t i = 0; i < v.size(); ++i)
    FUZZ_CHECK(v[i] == m.values[i], after, ": element ", i, " is ", v[i], ", expected ", m.values[i], " in ",
               dtype_name(t.dtype()), shape_to_string(t.shape()));
}

/// Builds the starting tensor; nullopt when the input asks for one too large to allocate
/// here (construction of those is still checked to throw when the size overflows).
std::optional<Tensor> construct(fuzz::Input& in, Model& m) {
  const DType dtype = kDTypes[in.choice(std::size(kDTypes))];
  const Shape shape = decode_shape(in, 0, 5);
  const std::size_t how = in.choice(5);
  const auto n = checked_numel(shape);
  const Wide bytes = n ? Wide(*n) * static_cast<Wide>(dtype_size(dtype)) : 0;
  if (!size_ok(shape, dtype_size(dtype))) {
    // Negative dims, or more elements/bytes than fit: must be refused, before allocating.
    try {
      Tensor t = how == 0   ? Tensor::zeros(dtype, shape)
                 : how == 3 ? Tensor(allocate_host(64), dtype, shape, 0)
                            : Tensor(dtype, shape);
      FUZZ_CHECK(false, "Tensor accepted shape ", shape_to_string(shape), " of ", dtype_name(dtype),
                 " (numel ", t.numel(), ", nbytes ", t.nbytes(), ")");
    } catch (const Error&) {
    }
    return std::nullopt;
  }
  if (*n > kMaxElements || bytes > Wide(kMaxBytes)) return std::nullopt;

  m.shape = shape;
  m.values.assign(static_cast<std::size_t>(*n), 0.0);
  switch (how) {
    case 0:
      return Tensor::zeros(dtype, shape);
    case 1: {
      const double v = small_value(in);
      std::fill(m.values.begin(), m.values.end(), stored(dtype, v));
      return Tensor::full(dtype, shape, v);
    }
    case 2: {  // from values, sometimes too few or too many
      std::vector<double> vals(static_cast<std::size_t>(*n));
      for (auto& v : vals) v = small_value(in);
      const std::uint8_t b = in.byte();
      if (b >= 240) vals.push_back(1);
      if (b >= 248 && vals.size() >= 2) vals.resize(vals.size() - 2);
      try {
        Tensor t = Tensor::from(vals, shape, dtype);
        FUZZ_CHECK(static_cast<i64>(vals.size()) == *n, "Tensor::from accepted ", vals.size(), " values for ",
                   shape_to_string(shape));
        for (std::size_t i = 0; i < vals.size(); ++i) m.values[i] = stored(dtype, vals[i]);
        return t;
      } catch (const Error&) {
        FUZZ_CHECK(static_cast<i64>(vals.size()) != *n, "Tensor::from rejected ", vals.size(), " values for ",
                   shape_to_string(shape));
        return std::nullopt;
      }
    }
    case 3: {  // wrapping storage at an offset
      const std::size_t storage_bytes = static_cast<std::size_t>(in.number(0, 64)) % (kMaxBytes + 1);
      const i64 offset = in.number(0, 8);
      auto storage = allocate_host(storage_bytes);
      const Wide need = (Wide(offset) + *n) * static_cast<Wide>(dtype_size(dtype));
      try {
        Tensor t(storage, dtype, shape, offset);
        FUZZ_CHECK(offset >= 0 && need <= Wide(storage_bytes), "Tensor wrapped ", storage_bytes,
                   " bytes as ", dtype_name(dtype), shape_to_string(shape), " at offset ", offset);
        t.fill(0);
        return t;
      } catch (const Error&) {
        FUZZ_CHECK(offset < 0 || need > Wide(storage_bytes), "Tensor refused ", storage_bytes, " bytes for ",
                   dtype_name(dtype), shape_to_string(shape), " at offset ", offset);
        return std::nullopt;
      }
    }
    default: {
      Tensor t(dtype, shape);
      t.fill(0);
      return t;
    }
  }
}

void op_reshape(fuzz::Input& in, Tensor& t, Model& m) {
  Shape target;
  if (in.flag()) {
    target = decode_shape(in, -1, 6);
  } else {  // a factorisation of numel, with a -1 now and then: usually valid
    i64 rest = static_cast<i64>(m.values.size());
    for (std::size_t r = in.choice(4); r > 0 && rest > 0; --r) {
      i64 f = 1 + static_cast<i64>(in.choice(6));
      while (rest % f != 0) --f;
      target.push_back(f);
      rest /= f;
    }
    target.push_back(rest);
    if (in.flag()) target[in.choice(target.size())] = -1;
  }
  const auto explicit_n = checked_numel(target);
  const int wild = static_cast<int>(std::count(target.begin(), target.end(), i64{-1}));
  // With one -1, the others known, positive and dividing numel, the wildcard is determined.
  Shape others;
  for (i64 d : target)
    if (d != -1) others.push_back(d);
  const auto known = checked_numel(others);
  const i64 count = static_cast<i64>(m.values.size());
  Shape resolved = target;
  if (wild == 1 && known && *known > 0 && count % *known == 0)
    for (auto& d : resolved)
      if (d == -1) d = count / *known;
  const bool must_accept = ((explicit_n && *explicit_n == count) ||
                            (wild == 1 && known && *known > 0 && count % *known == 0)) &&
                           size_ok(resolved, dtype_size(t.dtype()));
  if (verbose()) std::fprintf(stderr, "fuzz_tensor: %s.reshape(%s)\n", shape_to_string(t.shape()).c_str(), shape_to_string(target).c_str());
  Tensor r;
  try {
    r = t.reshape(target);
  } catch (const Error&) {
    FUZZ_CHECK(!must_accept, "reshape ",
               shape_to_string(t.shape()), " -> ", shape_to_string(target), " was rejected");
    return;
  }
  for (i64 d : r.shape()) FUZZ_CHECK(d >= 0, "reshape to ", shape_to_string(target), " gave ", shape_to_string(r.shape()));
  FUZZ_CHECK(r.rank() == static_cast<int>(target.size()), "reshape changed the rank");
  FUZZ_CHECK(wild <= 1, "reshape accepted ", wild, " wildcards");
  for (std::size_t i = 0; i < target.size(); ++i)
    if (target[i] != -1) FUZZ_CHECK(r.shape()[i] == target[i], "reshape to ", shape_to_string(target), " gave ", shape_to_string(r.shape()));
  m.shape = r.shape();
  expect_model(r, m, "reshape");
  t = r;
}

void op_permute(fuzz::Input& in, Tensor& t, Model& m) {
  std::vector<int> axes(static_cast<std::size_t>(t.rank()));
  std::iota(axes.begin(), axes.end(), 0);
  if (in.byte() < 224) {
    for (std::size_t i = axes.size(); i > 1; --i) std::swap(axes[i - 1], axes[in.choice(i)]);
  } else {
    axes.clear();
    for (std::size_t r = in.choice(6); r > 0; --r) axes.push_back(static_cast<int>(in.number(-1, 5)));
  }
  std::vector<int> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  bool perm = sorted.size() == static_cast<std::size_t>(t.rank());
  for (std::size_t i = 0; perm && i < sorted.size(); ++i) perm = sorted[i] == static_cast<int>(i);
  if (verbose()) std::fprintf(stderr, "fuzz_tensor: %s.permute(%zu axes)\n", shape_to_string(t.shape()).c_str(), axes.size());
  Tensor r;
  try {
    r = t.permute(axes);
  } catch (const Error&) {
    FUZZ_CHECK(!perm, "permute by a permutation was rejected");
    return;
  }
  FUZZ_CHECK(perm, "permute accepted axes that are not a permutation");
  Model out;
  for (int a : axes) out.shape.push_back(m.shape[static_cast<std::size_t>(a)]);
  out.values.resize(m.values.size());
  const auto old_strides = m.values.empty() ? std::vector<i64>{} : strides_of(m.shape);
  for (std::size_t i = 0; i < out.values.size(); ++i) {
    const auto idx = unflatten(static_cast<i64>(i), out.shape);
    i64 from = 0;
    for (std::size_t j = 0; j < axes.size(); ++j) from += idx[j] * old_strides[static_cast<std::size_t>(axes[j])];
    out.values[i] = m.values[static_cast<std::size_t>(from)];
  }
  m = out;
  expect_model(r, m, "permute");
  t = r;
}

void op_slice(fuzz::Input& in, Tensor& t, Model& m) {
  const int rank = t.rank();
  const int axis = static_cast<int>(in.number(-rank, rank > 0 ? rank - 1 : 0));
  const i64 begin = in.number(-6, 8), end = in.number(-6, 8), step = in.number(1, 3);
  const int a = axis < 0 ? axis + rank : axis;
  const bool ok = a >= 0 && a < rank && step >= 1;
  if (verbose())
    std::fprintf(stderr, "fuzz_tensor: %s%s (strides %s, offset %lld).slice(%d, %lld, %lld, %lld)\n",
                 std::string(dtype_name(t.dtype())).c_str(), shape_to_string(t.shape()).c_str(),
                 shape_to_string(t.strides()).c_str(), static_cast<long long>(t.offset()), axis,
                 static_cast<long long>(begin), static_cast<long long>(end), static_cast<long long>(step));
  Tensor r;
  try {
    r = t.slice(axis, begin, end, step);
  } catch (const Error&) {
    FUZZ_CHECK(!ok, "slice(", axis, ", ", begin, ", ", end, ", ", step, ") of ", shape_to_string(t.shape()),
               " was rejected");
    return;
  }
  FUZZ_CHECK(ok, "slice(", axis, ", ", begin, ", ", end, ", ", step, ") of rank ", rank, " was accepted");
  // Python's semantics for a positive step.
  const auto ua = static_cast<std::size_t>(a);
  const Wide n = m.shape[ua];
  auto norm = [&](i64 v) { return std::clamp<Wide>(v < 0 ? Wide(v) + n : Wide(v), 0, n); };
  const Wide b = norm(begin), e = norm(end);
  const i64 len = e > b ? static_cast<i64>((e - b + step - 1) / step) : 0;
  Model out;
  out.shape = m.shape;
  out.shape[ua] = len;
  const auto n_out = checked_numel(out.shape);
  FUZZ_CHECK(n_out.has_value(), "slice produced an impossible shape");
  out.values.resize(static_cast<std::size_t>(*n_out));
  const auto old_strides = out.values.empty() ? std::vector<i64>{} : strides_of(m.shape);
  for (std::size_t i = 0; i < out.values.size(); ++i) {
    auto idx = unflatten(static_cast<i64>(i), out.shape);
    idx[ua] = static_cast<i64>(b) + idx[ua] * step;
    i64 from = 0;
    for (std::size_t j = 0; j < idx.size(); ++j) from += idx[j] * old_strides[j];
    out.values[i] = m.values[static_cast<std::size_t>(from)];
  }
  m = out;
  expect_model(r, m, "slice");
  t = r;
}

template <class T>
void check_at(fuzz::Input& in, const Tensor& t, const Model& m) {
  std::vector<i64> idx;
  for (int r = 0; r < t.rank(); ++r) idx.push_back(in.number(-1, 4));
  if (in.byte() >= 248) idx.push_back(0);  // wrong count
  // An empty tensor has no element; otherwise every dim is small (numel <= kMaxElements).
  bool inside = idx.size() == m.shape.size() && !m.values.empty();
  i64 flat = 0;
  for (std::size_t i = 0; inside && i < idx.size(); ++i) {
    inside = idx[i] >= 0 && idx[i] < m.shape[i];
    if (inside) flat = flat * m.shape[i] + idx[i];  // an index outside may be near INT64_MAX
  }
  try {
    T v{};
    switch (idx.size()) {
      case 0: v = t.at<T>({}); break;
      case 1: v = t.at<T>({idx[0]}); break;
      case 2: v = t.at<T>({idx[0], idx[1]}); break;
      case 3: v = t.at<T>({idx[0], idx[1], idx[2]}); break;
      case 4: v = t.at<T>({idx[0], idx[1], idx[2], idx[3]}); break;
      case 5: v = t.at<T>({idx[0], idx[1], idx[2], idx[3], idx[4]}); break;
      default: v = t.at<T>({idx[0], idx[1], idx[2], idx[3], idx[4], idx[5]}); break;
    }
    FUZZ_CHECK(inside, "at() accepted an index outside ", shape_to_string(m.shape));
    FUZZ_CHECK(static_cast<double>(v) == m.values[static_cast<std::size_t>(flat)], "at() read ", static_cast<double>(v),
               ", expected ", m.values[static_cast<std::size_t>(flat)]);
  } catch (const Error&) {
    FUZZ_CHECK(!inside, "at() rejected an index inside ", shape_to_string(m.shape));
  }
}

void op_misc(fuzz::Input& in, Tensor& t, Model& m) {
  switch (in.choice(8)) {
    case 0:
      t = t.contiguous();
      FUZZ_CHECK(t.is_contiguous(), "contiguous() is not contiguous");
      expect_model(t, m, "contiguous");
      break;
    case 1:
      t = t.clone();
      FUZZ_CHECK(t.is_contiguous(), "clone() is not contiguous");
      expect_model(t, m, "clone");
      break;
    case 2: {
      const DType to = kDTypes[in.choice(std::size(kDTypes))];
      if (!size_ok(m.shape, dtype_size(to))) {  // a zero-size shape too large for the wider type
        try {
          (void)t.astype(to);
          FUZZ_CHECK(false, "astype(", dtype_name(to), ") accepted ", shape_to_string(m.shape));
        } catch (const Error&) {
        }
        break;
      }
      t = t.astype(to);
      FUZZ_CHECK(t.dtype() == to, "astype gave ", dtype_name(t.dtype()));
      for (auto& v : m.values) v = stored(to, v);
      expect_model(t, m, "astype");
      break;
    }
    case 3: {  // copy_from a tensor of another dtype (and sometimes another shape)
      DType from = kDTypes[in.choice(std::size(kDTypes))];
      if (!size_ok(m.shape, dtype_size(from))) from = t.dtype();
      std::vector<double> vals(m.values.size());
      for (auto& v : vals) v = small_value(in);
      const bool reshaped = in.byte() >= 240 && !m.shape.empty();
      Shape shape = m.shape;
      if (reshaped) shape.push_back(1);
      const Tensor src = Tensor::from(vals, shape, from);
      try {
        t.copy_from(src);
      } catch (const Error&) {
        FUZZ_CHECK(reshaped, "copy_from of the same shape was rejected");
        break;
      }
      FUZZ_CHECK(!reshaped, "copy_from accepted another shape");
      for (std::size_t i = 0; i < vals.size(); ++i) m.values[i] = stored(t.dtype(), stored(from, vals[i]));
      expect_model(t, m, "copy_from");
      break;
    }
    case 4: {
      const double v = small_value(in);
      t.fill(v);
      std::fill(m.values.begin(), m.values.end(), stored(t.dtype(), v));
      expect_model(t, m, "fill");
      break;
    }
    case 5: {
      if (m.values.empty()) break;
      const auto i = static_cast<i64>(in.choice(m.values.size()));
      const double v = small_value(in);
      t.set(i, v);
      m.values[static_cast<std::size_t>(i)] = stored(t.dtype(), v);
      FUZZ_CHECK(t.get(i) == m.values[static_cast<std::size_t>(i)], "get after set");
      expect_model(t, m, "set");
      break;
    }
    case 6: {
      const int axis = static_cast<int>(in.number(-6, 6));
      try {
        const i64 d = t.dim(axis);
        const int a = axis < 0 ? axis + t.rank() : axis;
        FUZZ_CHECK(a >= 0 && a < t.rank() && d == m.shape[static_cast<std::size_t>(a)], "dim(", axis, ") = ", d);
      } catch (const Error&) {
        FUZZ_CHECK(axis < -t.rank() || axis >= t.rank(), "dim(", axis, ") was rejected for rank ", t.rank());
      }
      break;
    }
    default:
      switch (t.dtype()) {
        case DType::float32: check_at<float>(in, t, m); break;
        case DType::float64: check_at<double>(in, t, m); break;
        case DType::int32: check_at<std::int32_t>(in, t, m); break;
        case DType::int64: check_at<std::int64_t>(in, t, m); break;
        default: break;
      }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  Model m;
  std::optional<Tensor> start;
  try {
    start = construct(in, m);
  } catch (const MemoryError&) {
    return 0;
  }
  if (!start) return 0;
  Tensor t = *start;
  if (verbose())
    std::fprintf(stderr, "fuzz_tensor: start %s%s\n", std::string(dtype_name(t.dtype())).c_str(),
                 shape_to_string(t.shape()).c_str());
  expect_model(t, m, "construction");
  for (int step = 0; step < 24 && in.left() > 0; ++step) {
    switch (in.choice(4)) {
      case 0: op_reshape(in, t, m); break;
      case 1: op_permute(in, t, m); break;
      case 2: op_slice(in, t, m); break;
      default: op_misc(in, t, m); break;
    }
  }
  // The first tensor is a view of the same storage for most paths: it must still read.
  (void)start->to_vector();
  return 0;
}
