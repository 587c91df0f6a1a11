// .npy/.npz saving and loading: round trips of every dtype, files NumPy wrote (committed
// fixtures, and a live python3+numpy check when available), shared variables by name,
// and hostile files that must raise clear errors. Also the float16/bfloat16 conversions
// (Eigen's types) against an independent decoding of every bit pattern.
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>
#include <convgraph/core/npy.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace convgraph;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(__FILE__).parent_path() / "npy_fixtures";

struct TempDir {
  fs::path dir;
  TempDir() {
    static int n = 0;
    dir = fs::temp_directory_path() / ("convgraph_npy_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().raw(), b.contiguous().raw(), a.nbytes()) == 0;
}

Tensor sample(DType t, Shape shape) {
  Tensor x(t, std::move(shape));
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, t == DType::boolean ? i % 3 == 0 : (i % 7) * 0.75 - 2);
  return x;
}

/// Debian's python3 (where python3-numpy installs numpy), else the one on PATH.
std::string python3() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

}  // namespace

TEST_CASE("npy: every dtype round-trips through .npy and .npz", "[core][npy]") {
  TempDir tmp;
  std::map<std::string, Tensor> all;
  for (DType t : {DType::float16, DType::bfloat16, DType::float32, DType::float64, DType::int32, DType::int64, DType::boolean}) {
    INFO(dtype_name(t));
    const Tensor x = sample(t, {2, 3, 4});
    save_npy(tmp / "x.npy", x);
    CHECK(same(load_npy(tmp / "x.npy"), x));
    all.emplace(std::string(dtype_name(t)), x);
  }
  all.emplace("scalar", Tensor::scalar(2.5, DType::float64));
  all.emplace("empty", Tensor(DType::float32, {0, 5}));
  all.emplace("strided", sample(DType::float32, {4, 6}).permute({1, 0}).slice(0, 1, 5));  // written in C order
  save_npz(tmp / "all.npz", all);
  const auto back = load_npz(tmp / "all.npz");
  REQUIRE(back.size() == all.size());
  for (const auto& [name, t] : all) {
    INFO(name);
    CHECK(same(back.at(name), t.contiguous()));
  }
  // The header is numpy's: 64-byte aligned data, C order, little-endian descr.
  const std::string bytes = read_bytes(tmp / "x.npy");
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK_THAT(bytes, Contains("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3, 4), }"));
  CHECK((bytes.size() - 24) % 64 == 0);
}

TEST_CASE("npy: files NumPy wrote (committed fixtures) load with their values", "[core][npy]") {
  const Tensor f4 = load_npy((kFixtures / "f4_2x3.npy").string());
  CHECK(f4.dtype() == DType::float32);
  CHECK(f4.shape() == Shape{2, 3});
  CHECK(f4.to_vector() == std::vector<double>{-1, -0.5, 0, 0.5, 1, 1.5});
  const Tensor s = load_npy((kFixtures / "f8_scalar.npy").string());
  CHECK(s.rank() == 0);
  CHECK(s.get(0) == 3.25);
  CHECK(load_npy((kFixtures / "i8_vec.npy").string()).to_vector() == std::vector<double>{-1, 1099511627776.0, 7});
  CHECK(load_npy((kFixtures / "i4_empty.npy").string()).shape() == Shape{0, 3});
  CHECK(load_npy((kFixtures / "b1.npy").string()).to_vector() == std::vector<double>{1, 0, 1});
  const Tensor h = load_npy((kFixtures / "f2.npy").string());
  CHECK(h.dtype() == DType::float16);
  CHECK(h.get(1) == -2.5);
  CHECK(h.get(2) == 65504);
  CHECK(h.get(3) == Approx(5.96046e-08).epsilon(1e-3));  // the smallest subnormal
  CHECK(load_npy((kFixtures / "v2.npy").string()).to_vector() == std::vector<double>{1, 2, 3, 4});  // format 2.0
  const auto z = load_npz((kFixtures / "savez.npz").string());  // np.savez: stored, zip64 extra fields
  CHECK(z.at("w").to_vector() == std::vector<double>{0, 1, 2, 3});
  CHECK(z.at("b").dtype() == DType::float64);
  const auto c = load_npz((kFixtures / "savez_compressed.npz").string());  // deflated
  CHECK(c.at("w").shape() == Shape{10, 10});
  CHECK(c.at("w").get(99) == 99);
  CHECK(c.at("flags").to_vector() == std::vector<double>{1, 0});
}

TEST_CASE("npy: what NumPy cannot be given is refused with the reason", "[core][npy]") {
  CHECK_THROWS_AS(load_npy((kFixtures / "fortran.npy").string()), ValueError);
  CHECK_THROWS_WITH(load_npy((kFixtures / "fortran.npy").string()), Contains("fortran.npy") && Contains("Fortran-order"));
  CHECK_THROWS_WITH(load_npy((kFixtures / "bigendian.npy").string()), Contains("big-endian") && Contains("'>f4'"));
  CHECK_THROWS_AS(load_npy((kFixtures / "complex.npy").string()), TypeError);
  CHECK_THROWS_WITH(load_npy((kFixtures / "complex.npy").string()), Contains("'<c8'") && Contains("'<f4'"));
  CHECK_THROWS_WITH(load_npy("/nonexistent/x.npy"), Contains("load_npy") && Contains("/nonexistent/x.npy"));
  CHECK_THROWS_WITH(save_npy("/nonexistent/x.npy", Tensor::scalar(1)), Contains("cannot write"));
}

TEST_CASE("npy: hostile and broken files raise errors, never crash or allocate wildly", "[core][npy]") {
  TempDir tmp;
  const std::string good = read_bytes((kFixtures / "f4_2x3.npy").string());
  auto load_bytes = [&](const std::string& bytes) {
    write_bytes(tmp / "bad.npy", bytes);
    return load_npy(tmp / "bad.npy");
  };
  auto with_header = [&](const std::string& dict) {
    std::string h = dict + "\n";
    return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xff) + static_cast<char>(h.size() >> 8) + h;
  };
  CHECK_THROWS_WITH(load_bytes(""), Contains("truncated"));
  CHECK_THROWS_WITH(load_bytes("PK\x03\x04 not npy at all"), Contains("not a .npy file"));
  CHECK_THROWS_WITH(load_bytes(good.substr(0, 40)), Contains("truncated") && Contains("header"));
  CHECK_THROWS_WITH(load_bytes(good.substr(0, good.size() - 1)), Contains("truncated") && Contains("24 bytes of data"));
  std::string v9 = good;
  v9[6] = 9;
  CHECK_THROWS_WITH(load_bytes(v9), Contains("version 9.0"));
  // 4 PiB announced in a tiny file: refused before any allocation.
  CHECK_THROWS_WITH(load_bytes(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1024), }")),
                    Contains("truncated") && Contains("4503599627370496 bytes"));
  CHECK_THROWS_WITH(load_bytes(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8), }")),
                    Contains("more elements than fit in int64"));
  CHECK_THROWS_AS(load_bytes(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 2), }")), ShapeError);
  CHECK_THROWS_WITH(load_bytes(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }")),
                    Contains("int64"));
  CHECK_THROWS_WITH(load_bytes(with_header("{'descr': '<f4', 'shape': (2,), }")), Contains("exactly 'descr'"));
  CHECK_THROWS_WITH(load_bytes(with_header("{'descr': 'O', 'fortran_order': False, 'shape': (2,), }")), Contains("'O'"));
  CHECK_THROWS_WITH(load_bytes(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,")), Contains("malformed"));
  CHECK_THROWS_WITH(load_bytes(with_header(std::string(200, '[') + std::string(200, ']'))), Contains("nested too deeply"));
  CHECK_THROWS_WITH(load_bytes(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': 'x', }")), Contains("'shape'"));

  // Zip archives: not a zip, cut short, corrupted data (CRC), a zip bomb's claim.
  std::map<std::string, Tensor> arrays{{"w", sample(DType::float32, {8, 8})}};
  save_npz(tmp / "ok.npz", arrays);
  const std::string zip = read_bytes(tmp / "ok.npz");
  auto load_zip = [&](const std::string& bytes) {
    write_bytes(tmp / "bad.npz", bytes);
    return load_npz(tmp / "bad.npz");
  };
  CHECK_THROWS_WITH(load_zip("hello"), Contains("not a .npz file"));
  CHECK_THROWS_WITH(load_zip(zip.substr(0, zip.size() / 2)), Contains("bad.npz"));
  std::string flipped = zip;
  flipped[200] ^= 0x55;  // a byte of the array data
  CHECK_THROWS_WITH(load_zip(flipped), Contains("CRC mismatch") && Contains("'w.npy'"));
  std::string moved = zip;
  const auto cd = moved.rfind(std::string("PK\x01\x02", 4));
  moved[cd + 42] = 0x7f;  // the entry's offset now points into nowhere
  CHECK_THROWS_AS(load_zip(moved), ValueError);
  const std::string deflated = read_bytes((kFixtures / "savez_compressed.npz").string());
  std::string bomb = deflated;
  const auto cd2 = bomb.find(std::string("PK\x01\x02", 4));
  for (int i = 0; i < 4; ++i) bomb[cd2 + 24 + static_cast<std::size_t>(i)] = '\x7f';  // uncompressed size ~2 GiB
  CHECK_THROWS_WITH(load_zip(bomb), Contains("impossible for deflate"));
  std::string garbage = deflated;
  const auto local = garbage.find(std::string("PK\x03\x04", 4));
  const auto data = local + 30 + static_cast<unsigned char>(garbage[local + 26]) + static_cast<unsigned char>(garbage[local + 28]);
  for (std::size_t i = 2; i < 14; ++i) garbage[data + i] = static_cast<char>(0xff);  // inside the deflate stream
  CHECK_THROWS_AS(load_zip(garbage), ValueError);
}

TEST_CASE("npy: shared variables save and load by name", "[core][npy]") {
  TempDir tmp;
  SharedVar w = shared(sample(DType::float32, {3, 2}), "layer1/w");
  SharedVar b = shared(sample(DType::float64, {2}), "layer1/b");
  save_shared(tmp / "model.npz", {w, b});
  const Tensor w0 = w.get_value(), b0 = b.get_value();
  w.set_value(Tensor::zeros(DType::float32, {3, 2}));
  b.set_value(Tensor::zeros(DType::float64, {2}));
  load_shared(tmp / "model.npz", {b, w});
  CHECK(same(w.get_value(), w0));
  CHECK(same(b.get_value(), b0));
  CHECK(load_npz(tmp / "model.npz").count("layer1/w") == 1);

  SharedVar other = shared(Tensor::zeros(DType::float32, {3, 2}), "other");
  CHECK_THROWS_WITH(load_shared(tmp / "model.npz", {w, other}), Contains("no array named 'other'") && Contains("'layer1/w'"));
  SharedVar wrong_shape = shared(Tensor::zeros(DType::float32, {2, 3}), "layer1/w");
  w.set_value(Tensor::zeros(DType::float32, {3, 2}));
  CHECK_THROWS_AS(load_shared(tmp / "model.npz", {w, wrong_shape}), ShapeError);
  CHECK(w.get_value().to_vector() == std::vector<double>(6, 0.0));  // nothing changed on the error
  SharedVar wrong_type = shared(Tensor::zeros(DType::float64, {3, 2}), "layer1/w");
  CHECK_THROWS_WITH(load_shared(tmp / "model.npz", {wrong_type}), Contains("float32") && Contains("float64"));
  CHECK_THROWS_WITH(save_shared(tmp / "x.npz", {shared(Tensor::scalar(1))}), Contains("no name"));
  CHECK_THROWS_WITH(save_shared(tmp / "x.npz", {w, wrong_shape}), Contains("two variables are named 'layer1/w'"));
}

TEST_CASE("npy: python3's numpy reads what convgraph wrote and the reverse", "[core][npy][python]") {
  TempDir tmp;
  std::map<std::string, Tensor> arrays{{"f32", sample(DType::float32, {2, 3})}, {"i64", sample(DType::int64, {4})},
                                       {"f16", sample(DType::float16, {3})}, {"bf16", sample(DType::bfloat16, {3})},
                                       {"flags", sample(DType::boolean, {5})}};
  save_npz(tmp / "from_cpp.npz", arrays);
  save_npy(tmp / "from_cpp.npy", arrays.at("f32"));
  const std::string script = tmp / "check.py";
  write_bytes(script,
              "import sys\n"
              "try:\n"
              "    import numpy as np\n"
              "except ImportError:\n"
              "    sys.exit(77)\n"
              "d = sys.argv[1]\n"
              "z = np.load(d + '/from_cpp.npz')\n"
              "v = [(i % 7) * 0.75 - 2 for i in range(6)]\n"
              "assert z['f32'].dtype == np.float32 and z['f32'].shape == (2, 3), z['f32']\n"
              "assert np.array_equal(z['f32'].ravel(), np.array(v, np.float32))\n"
              "assert np.array_equal(np.load(d + '/from_cpp.npy'), z['f32'])\n"
              "assert z['i64'].dtype == np.int64 and list(z['i64']) == [-2, -1, -0, 0], z['i64']\n"
              "assert z['f16'].dtype == np.float16 and list(z['f16']) == [-2, -1.25, -0.5]\n"
              "bf = (z['bf16']['bfloat16'].astype(np.uint32) << 16).view(np.float32)\n"
              "assert list(bf) == [-2, -1.25, -0.5], bf\n"
              "assert list(z['flags']) == [True, False, False, True, False]\n"
              "np.savez(d + '/from_py.npz', a=np.arange(6, dtype=np.float64).reshape(3, 2), h=np.array([0.1], np.float16))\n"
              "np.savez_compressed(d + '/from_py_c.npz', a=np.arange(6, dtype=np.int32))\n");
  const int status = std::system((python3() + " " + script + " " + tmp.dir.string() + " 2>&1").c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 77 || rc == 127) {
    WARN("SKIPPED: no python3 with numpy (Debian python3-numpy) to check interoperability with");
    return;
  }
  REQUIRE(rc == 0);
  const auto back = load_npz(tmp / "from_py.npz");
  CHECK(back.at("a").dtype() == DType::float64);
  CHECK(back.at("a").shape() == Shape{3, 2});
  CHECK(back.at("a").to_vector() == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(back.at("h").get(0) == Approx(0.1).epsilon(1e-3));
  CHECK(load_npz(tmp / "from_py_c.npz").at("a").to_vector() == std::vector<double>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("tensor: float16 and bfloat16 conversions agree with an independent decoding of every bit pattern", "[core][tensor]") {
  Tensor h(DType::float16, {1}), b(DType::bfloat16, {1});
  auto* hp = static_cast<std::uint16_t*>(h.raw());
  auto* bp = static_cast<std::uint16_t*>(b.raw());
  int bad = 0;
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto u = static_cast<std::uint16_t>(bits);
    // IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
    const int e = (u >> 10) & 31, m = u & 1023;
    const double sign = (u & 0x8000) ? -1 : 1;
    const double want = e == 31 ? (m ? NAN : sign * INFINITY) : e == 0 ? sign * std::ldexp(m, -24) : sign * std::ldexp(1024 + m, e - 25);
    *hp = u;
    const double got = h.get(0);
    bad += std::isnan(want) ? !std::isnan(got) : got != want;
    h.set(0, got);  // back to the same bits (NaN stays a NaN)
    bad += std::isnan(want) ? !std::isnan(h.get(0)) : *hp != u;
    // bfloat16: the top half of a float32.
    const std::uint32_t f32 = bits << 16;
    float wantb;
    std::memcpy(&wantb, &f32, 4);
    *bp = u;
    const double gotb = b.get(0);
    bad += std::isnan(wantb) ? !std::isnan(gotb) : gotb != wantb;
    b.set(0, gotb);
    bad += std::isnan(wantb) ? !std::isnan(b.get(0)) : *bp != u;
  }
  CHECK(bad == 0);
  // Rounding to nearest even, overflow to infinity.
  h.set(0, 1 + std::ldexp(1, -11));  // halfway between 1 and 1 + 2^-10
  CHECK(h.get(0) == 1);
  h.set(0, 1 + 3 * std::ldexp(1, -11));
  CHECK(h.get(0) == 1 + std::ldexp(1, -9));
  h.set(0, 65520);  // halfway between 65504 and 65536 (not representable)
  CHECK(std::isinf(h.get(0)));
  b.set(0, 1 + std::ldexp(1, -8));  // halfway between 1 and 1 + 2^-7
  CHECK(b.get(0) == 1);
  b.set(0, 1 + 3 * std::ldexp(1, -8));
  CHECK(b.get(0) == 1 + std::ldexp(1, -6));
}
