// NumPy .npy and .npz files (include/convgraph/core/npy.hpp). The .npy header is a Python
// dict literal, parsed here by a small literal parser; .npz is a zip archive, read
// through its central directory (zip64 included, as np.savez always writes it), with
// zlib for CRC-32 and for the deflated entries of np.savez_compressed.
#include "convgraph/core/npy.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <unistd.h>
#include <zlib.h>

#include "core/checked_math.hpp"

namespace convgraph {

static_assert(std::endian::native == std::endian::little, "the .npy reader and writer assume a little-endian host");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kMaxHeader = std::size_t{1} << 20;  // numpy itself refuses over 10 kB by default
constexpr int kMaxRank = 64;
constexpr std::string_view kBf16Field = "bfloat16";

// ---- dtypes -------------------------------------------------------------------------

std::string descr_of(DType t) {
  switch (t) {
    case DType::float16: return "'<f2'";
    case DType::bfloat16: return "[('bfloat16', '<u2')]";
    case DType::float32: return "'<f4'";
    case DType::float64: return "'<f8'";
    case DType::int32: return "'<i4'";
    case DType::int64: return "'<i8'";
    case DType::boolean: return "'|b1'";
  }
  return {};
}

constexpr std::string_view kSupported = "'<f2', '<f4', '<f8', '<i4', '<i8', '|b1', [('bfloat16', '<u2')]";

// ---- the header's Python literal --------------------------------------------------------

struct Py {
  enum Kind { str, integer, boolean, none, seq, dict } kind = none;
  std::string s;                  // str
  std::int64_t i = 0;             // integer
  bool b = false;                 // boolean
  std::vector<Py> items;          // seq items, dict values
  std::vector<std::string> keys;  // dict keys
  const Py* get(std::string_view key) const {
    for (std::size_t k = 0; k < keys.size(); ++k)
      if (keys[k] == key) return &items[k];
    return nullptr;
  }
};

class LiteralParser {
 public:
  LiteralParser(std::string_view text, const std::string& where) : t_(text), where_(where) {}
  Py parse() {
    Py v = value(0);
    skip();
    if (pos_ != t_.size()) fail("unexpected text after the dict");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError(msg(where_, ": malformed .npy header (", what, " at byte ", pos_, "): '",
                         std::string(t_.substr(0, 200)), "'"));
  }
  void skip() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < t_.size() && t_[pos_] == c) return ++pos_, true;
    return false;
  }
  Py value(int depth) {
    if (depth > 8) fail("nested too deeply");
    skip();
    if (pos_ >= t_.size()) fail("the header ends early");
    const char c = t_[pos_];
    Py v;
    if (c == '\'' || c == '"') {
      v.kind = Py::str;
      v.s = string();
    } else if (c == '{') {
      ++pos_;
      v.kind = Py::dict;
      while (!eat('}')) {
        skip();
        if (pos_ >= t_.size() || (t_[pos_] != '\'' && t_[pos_] != '"')) fail("expected a string key");
        v.keys.push_back(string());
        if (!eat(':')) fail("expected ':'");
        v.items.push_back(value(depth + 1));
        if (!eat(',')) {
          if (!eat('}')) fail("expected ',' or '}'");
          break;
        }
      }
    } else if (c == '(' || c == '[') {
      const char close = c == '(' ? ')' : ']';
      ++pos_;
      v.kind = Py::seq;
      while (!eat(close)) {
        v.items.push_back(value(depth + 1));
        if (!eat(',')) {
          if (!eat(close)) fail(msg("expected ',' or '", close, "'"));
          break;
        }
      }
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Py::integer;
      const bool neg = c == '-';
      if (neg) ++pos_;
      if (pos_ >= t_.size() || t_[pos_] < '0' || t_[pos_] > '9') fail("expected a digit");
      std::int64_t n = 0;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9')
        if (!detail::try_mul(n, 10, n) || !detail::try_add(n, t_[pos_++] - '0', n)) fail("an integer past int64");
      if (pos_ < t_.size() && (t_[pos_] == 'L' || t_[pos_] == 'l')) ++pos_;  // Python 2's long
      v.i = neg ? -n : n;
    } else if (t_.substr(pos_, 4) == "True" || t_.substr(pos_, 5) == "False") {
      v.kind = Py::boolean;
      v.b = t_[pos_] == 'T';
      pos_ += v.b ? 4 : 5;
    } else if (t_.substr(pos_, 4) == "None") {
      pos_ += 4;
    } else {
      fail(msg("unexpected character '", c, "'"));
    }
    return v;
  }
  std::string string() {
    const char q = t_[pos_++];
    std::string s;
    while (pos_ < t_.size() && t_[pos_] != q) {
      if (t_[pos_] == '\\' && pos_ + 1 < t_.size()) ++pos_;
      s += t_[pos_++];
    }
    if (pos_ >= t_.size()) fail("unterminated string");
    ++pos_;
    return s;
  }

  std::string_view t_;
  const std::string& where_;
  std::size_t pos_ = 0;
};

DType dtype_from(const Py& d, const std::string& where) {
  auto unsupported = [&](const std::string& text) -> DType {
    throw TypeError(msg(where, ": dtype ", text, " is not supported (convgraph reads ", kSupported, ")"));
  };
  if (d.kind == Py::seq) {  // a structured dtype: only the bfloat16 wrapper
    if (d.items.size() == 1 && d.items[0].kind == Py::seq && d.items[0].items.size() == 2 &&
        d.items[0].items[0].kind == Py::str && d.items[0].items[0].s == kBf16Field &&
        d.items[0].items[1].kind == Py::str && (d.items[0].items[1].s == "<u2" || d.items[0].items[1].s == "=u2"))
      return DType::bfloat16;
    if (d.items.size() == 1 && d.items[0].kind == Py::seq && d.items[0].items.size() == 2 &&
        d.items[0].items[1].kind == Py::str && d.items[0].items[1].s == ">u2")
      throw ValueError(msg(where, ": big-endian data (", kBf16Field, " '>u2') is not supported; save it little-endian"));
    return unsupported("(a structured dtype)");
  }
  if (d.kind != Py::str) return unsupported("(not a dtype string)");
  if (d.s.size() < 2) return unsupported("'" + d.s + "'");
  const char order = d.s[0];
  const std::string code = d.s.substr(1);
  static const std::pair<std::string_view, DType> kCodes[] = {
      {"f2", DType::float16}, {"f4", DType::float32}, {"f8", DType::float64},
      {"i4", DType::int32},   {"i8", DType::int64},   {"b1", DType::boolean}};
  for (const auto& [c, t] : kCodes)
    if (code == c) {
      if (order == '>' && dtype_size(t) > 1)
        throw ValueError(msg(where, ": big-endian data ('", d.s, "') is not supported; save it with arr.astype('<",
                             code, "')"));
      if (order != '<' && order != '|' && order != '=' && order != '>') break;
      return t;
    }
  return unsupported("'" + d.s + "'");
}

/// The header dict, padded with spaces so the data starts 64-byte aligned, as numpy does.
std::string npy_header(const Tensor& t) {
  std::string shape = "(";
  for (std::size_t i = 0; i < t.shape().size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
  if (t.shape().size() == 1) shape += ",";
  shape += ")";
  std::string dict = "{'descr': " + descr_of(t.dtype()) + ", 'fortran_order': False, 'shape': " + shape + ", }";
  const std::size_t unpadded = kMagic.size() + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

// ---- files --------------------------------------------------------------------------

struct File {
  std::FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

/// A range of bytes to read a .npy from: part of an open file, or a buffer.
struct Source {
  std::FILE* file = nullptr;
  std::uint64_t base = 0, size = 0;
  const std::string* buffer = nullptr;

  void read(std::uint64_t off, void* dst, std::size_t n, const std::string& where, const char* what) const {
    if (off > size || n > size - off)
      throw ValueError(msg(where, ": truncated: ", what, " needs bytes ", off, "..", off + n, " but there are only ", size));
    if (buffer) {
      std::memcpy(dst, buffer->data() + off, n);
      return;
    }
    if (fseeko(file, static_cast<off_t>(base + off), SEEK_SET) != 0 || std::fread(dst, 1, n, file) != n)
      throw ValueError(msg(where, ": read error at byte ", base + off, ": ", std::strerror(errno)));
  }
};

std::uint64_t le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes; i-- > 0;) v = v << 8 | p[i];
  return v;
}

Tensor parse_npy(const Source& src, const std::string& where) {
  unsigned char pre[12];
  src.read(0, pre, 8, where, "the magic string and version");
  if (std::memcmp(pre, kMagic.data(), kMagic.size()) != 0)
    throw ValueError(msg(where, ": not a .npy file (it does not start with \\x93NUMPY)"));
  const int major = pre[6];
  if (major < 1 || major > 3 || pre[7] != 0)
    throw ValueError(msg(where, ": .npy format version ", major, ".", int{pre[7]}, " is not supported (1.0 to 3.0 are)"));
  const int len_bytes = major == 1 ? 2 : 4;
  src.read(8, pre + 8, static_cast<std::size_t>(len_bytes), where, "the header length");
  const std::uint64_t header_len = le(pre + 8, len_bytes);
  if (header_len > kMaxHeader)
    throw ValueError(msg(where, ": .npy header of ", header_len, " bytes (the limit is ", kMaxHeader, ")"));
  std::string header(header_len, '\0');
  const std::uint64_t header_at = 8 + static_cast<std::uint64_t>(len_bytes);
  src.read(header_at, header.data(), header.size(), where, "the header");
  const Py dict = LiteralParser(header, where).parse();
  const Py* descr = dict.kind == Py::dict ? dict.get("descr") : nullptr;
  const Py* fortran = dict.kind == Py::dict ? dict.get("fortran_order") : nullptr;
  const Py* shape = dict.kind == Py::dict ? dict.get("shape") : nullptr;
  if (!descr || !fortran || !shape || dict.keys.size() != 3)
    throw ValueError(msg(where, ": the .npy header must hold exactly 'descr', 'fortran_order' and 'shape': '", header, "'"));
  const DType dtype = dtype_from(*descr, where);
  if (fortran->kind != Py::boolean) throw ValueError(msg(where, ": 'fortran_order' must be True or False"));
  if (shape->kind != Py::seq || shape->items.size() > kMaxRank)
    throw ValueError(msg(where, ": 'shape' must be a tuple of at most ", kMaxRank, " integers"));
  Shape dims;
  for (const auto& d : shape->items) {
    if (d.kind != Py::integer) throw ValueError(msg(where, ": 'shape' must hold integers"));
    dims.push_back(d.i);
  }
  const std::size_t nbytes = detail::checked_nbytes(dims, dtype, where);  // ShapeError: negative, overflow
  if (fortran->b && dims.size() > 1)
    throw ValueError(msg(where, ": Fortran-order arrays are not supported; save np.ascontiguousarray(a) instead"));
  const std::uint64_t data_at = header_at + header_len;
  if (data_at > src.size || nbytes > src.size - data_at)  // before allocating anything
    throw ValueError(msg(where, ": truncated: shape ", shape_to_string(dims), " of ", dtype_name(dtype), " needs ", nbytes,
                         " bytes of data but only ", data_at > src.size ? 0 : src.size - data_at, " follow the header"));
  Tensor t(dtype, dims);
  src.read(data_at, t.raw(), nbytes, where, "the data");
  if (dtype == DType::boolean) {  // any non-zero byte is True; a bool must hold 0 or 1
    auto* p = static_cast<unsigned char*>(t.raw());
    for (std::size_t i = 0; i < nbytes; ++i) p[i] = p[i] != 0;
  }
  return t;
}

std::uint64_t file_size(std::FILE* f, const std::string& where) {
  if (fseeko(f, 0, SEEK_END) != 0) throw ValueError(msg(where, ": cannot seek: ", std::strerror(errno)));
  const off_t n = ftello(f);
  if (n < 0) throw ValueError(msg(where, ": cannot tell its size: ", std::strerror(errno)));
  return static_cast<std::uint64_t>(n);
}

void open_read(File& file, const std::string& path, const char* who) {
  file.f = std::fopen(path.c_str(), "rb");
  if (!file.f) throw ValueError(msg(who, ": cannot open '", path, "': ", std::strerror(errno)));
}

Tensor host_contiguous(const Tensor& t, const std::string& who) {
  if (!t.defined()) throw ValueError(msg(who, ": the tensor is undefined"));
  if (t.device() != DeviceKind::cpu)
    throw TypeError(msg(who, ": the tensor lives on ", device_name(t.device()), "; copy it to the host first"));
  return t.contiguous();
}

/// Writes through "<path>.tmp.<pid>" and renames, so a failed save leaves the old file.
class AtomicWriter {
 public:
  AtomicWriter(const std::string& path, const char* who)
      : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())), who_(who) {
    f_.f = std::fopen(tmp_.c_str(), "wb");
    if (!f_.f) throw ValueError(msg(who_, ": cannot write '", path_, "': ", std::strerror(errno)));
  }
  ~AtomicWriter() {
    if (!done_) std::remove(tmp_.c_str());
  }
  void write(const void* p, std::size_t n) {
    if (n > 0 && std::fwrite(p, 1, n, f_.f) != n) fail();
    written_ += n;
  }
  void write(const std::string& s) { write(s.data(), s.size()); }
  std::uint64_t written() const { return written_; }
  void commit() {
    const int rc = std::fclose(f_.f);
    f_.f = nullptr;
    if (rc != 0) fail();
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail();
    done_ = true;
  }

 private:
  [[noreturn]] void fail() const { throw ValueError(msg(who_, ": cannot write '", path_, "': ", std::strerror(errno))); }
  std::string path_, tmp_;
  const char* who_;
  File f_;
  std::uint64_t written_ = 0;
  bool done_ = false;
};

// ---- zip ----------------------------------------------------------------------------

void put(std::string& s, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint32_t crc_of(std::uint32_t crc, const void* p, std::size_t n) {
  if (n == 0) return crc;  // zlib answers a null buffer with the initial value, not `crc`
  return static_cast<std::uint32_t>(crc32_z(crc, static_cast<const Bytef*>(p), n));
}

constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr std::uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr std::uint64_t kMax32 = 0xffffffffu;

struct ZipEntry {
  std::string name;
  int method = 0;
  std::uint32_t crc = 0;
  std::uint64_t csize = 0, usize = 0, offset = 0;
};

std::vector<ZipEntry> read_central_directory(std::FILE* f, std::uint64_t size, const std::string& where) {
  const Source whole{f, 0, size, nullptr};
  const std::uint64_t tail = std::min<std::uint64_t>(size, 22 + 65535);
  std::string buf(tail, '\0');
  whole.read(size - tail, buf.data(), buf.size(), where, "the end of the zip archive");
  const auto* b = reinterpret_cast<const unsigned char*>(buf.data());
  std::int64_t eocd = -1;
  for (std::int64_t i = static_cast<std::int64_t>(tail) - 22; i >= 0 && eocd < 0; --i)
    if (le(b + i, 4) == kEndSig && static_cast<std::uint64_t>(i) + 22 + le(b + i + 20, 2) == tail) eocd = i;
  if (eocd < 0) throw ValueError(msg(where, ": not a .npz file (no zip end-of-directory record)"));
  const unsigned char* e = b + eocd;
  std::uint64_t count = le(e + 10, 2), cd_size = le(e + 12, 4), cd_offset = le(e + 16, 4);
  if (count == 0xffff || cd_size == kMax32 || cd_offset == kMax32) {  // zip64: the real values are elsewhere
    const std::uint64_t locator = size - tail + static_cast<std::uint64_t>(eocd);
    unsigned char loc[20], rec[56];
    if (locator < 20) throw ValueError(msg(where, ": bad zip64 archive (no locator)"));
    whole.read(locator - 20, loc, 20, where, "the zip64 locator");
    if (le(loc, 4) != kZip64LocatorSig) throw ValueError(msg(where, ": bad zip64 archive (no locator)"));
    whole.read(le(loc + 8, 8), rec, 56, where, "the zip64 end record");
    if (le(rec, 4) != kZip64EndSig) throw ValueError(msg(where, ": bad zip64 archive (no end record)"));
    count = le(rec + 32, 8), cd_size = le(rec + 40, 8), cd_offset = le(rec + 48, 8);
  }
  if (cd_offset > size || cd_size > size - cd_offset || count > cd_size / 46)
    throw ValueError(msg(where, ": corrupt zip directory (", count, " entries, ", cd_size, " bytes at ", cd_offset,
                         " in a ", size, "-byte file)"));
  std::string cd(cd_size, '\0');
  whole.read(cd_offset, cd.data(), cd.size(), where, "the zip directory");
  const auto* c = reinterpret_cast<const unsigned char*>(cd.data());
  std::vector<ZipEntry> out;
  std::size_t pos = 0;
  for (std::uint64_t k = 0; k < count; ++k) {
    if (pos + 46 > cd.size() || le(c + pos, 4) != kCentralSig)
      throw ValueError(msg(where, ": corrupt zip directory (entry ", k, ")"));
    const unsigned char* h = c + pos;
    const std::size_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
    if (pos + 46 + name_len + extra_len + comment_len > cd.size())
      throw ValueError(msg(where, ": corrupt zip directory (entry ", k, " overruns it)"));
    ZipEntry z;
    z.name.assign(cd.data() + pos + 46, name_len);
    if (le(h + 8, 2) & 1) throw ValueError(msg(where, ": entry '", z.name, "' is encrypted"));
    z.method = static_cast<int>(le(h + 10, 2));
    z.crc = static_cast<std::uint32_t>(le(h + 16, 4));
    z.csize = le(h + 20, 4), z.usize = le(h + 24, 4), z.offset = le(h + 42, 4);
    // zip64 extra field (id 1): the 64-bit values of the fields that read 0xffffffff.
    const unsigned char* x = h + 46 + name_len;
    for (std::size_t xp = 0; xp + 4 <= extra_len;) {
      const std::size_t id = le(x + xp, 2), n = le(x + xp + 2, 2);
      if (xp + 4 + n > extra_len) break;
      if (id == 1) {
        std::size_t q = xp + 4;
        for (std::uint64_t* v : {&z.usize, &z.csize, &z.offset})
          if (*v == kMax32) {
            if (q + 8 > xp + 4 + n) throw ValueError(msg(where, ": corrupt zip64 field of entry '", z.name, "'"));
            *v = le(x + q, 8), q += 8;
          }
      }
      xp += 4 + n;
    }
    out.push_back(std::move(z));
    pos += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

}  // namespace

// ---- .npy ---------------------------------------------------------------------------

void save_npy(const std::string& path, const Tensor& t) {
  const Tensor c = host_contiguous(t, "save_npy");
  AtomicWriter out(path, "save_npy");
  out.write(npy_header(c));
  out.write(c.raw(), c.nbytes());
  out.commit();
}

Tensor load_npy(const std::string& path) {
  File f;
  open_read(f, path, "load_npy");
  const std::string where = "load_npy: '" + path + "'";
  return parse_npy(Source{f.f, 0, file_size(f.f, where), nullptr}, where);
}

// ---- .npz ---------------------------------------------------------------------------

void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays) {
  AtomicWriter out(path, "save_npz");
  std::string central;
  for (const auto& [name, tensor] : arrays) {
    const std::string who = "save_npz: array '" + name + "'";
    if (name.empty() || name.size() > 60000 || name.find('\0') != std::string::npos)
      throw ValueError(msg("save_npz: array name '", name, "' must be non-empty, without NUL, under 60000 bytes"));
    const Tensor c = host_contiguous(tensor, who);
    const std::string entry = name + ".npy", header = npy_header(c);
    const std::uint64_t size = header.size() + c.nbytes(), offset = out.written();
    if (size >= kMax32 || offset >= kMax32)
      throw ValueError(msg(who, ": entries and archives over 4 GiB are not supported (", size, " bytes at ", offset, ")"));
    const std::uint32_t crc = crc_of(crc_of(0, header.data(), header.size()), c.raw(), c.nbytes());
    std::string fields;  // what the local and central headers share: version .. name length
    put(fields, 20, 2), put(fields, 0, 2), put(fields, 0, 2);  // version 2.0, no flags, stored
    put(fields, 0, 2), put(fields, 0x21, 2);                   // 1980-01-01 00:00
    put(fields, crc, 4), put(fields, size, 4), put(fields, size, 4), put(fields, entry.size(), 2);
    std::string local;
    put(local, kLocalSig, 4);
    local += fields;
    put(local, 0, 2);  // no extra field
    out.write(local + entry + header);
    out.write(c.raw(), c.nbytes());
    put(central, kCentralSig, 4), put(central, 20, 2);  // made by: version 2.0
    central += fields;
    put(central, 0, 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 4);
    put(central, offset, 4);
    central += entry;
  }
  const std::uint64_t cd_offset = out.written();
  if (cd_offset >= kMax32) throw ValueError("save_npz: archives over 4 GiB are not supported");
  std::string end;
  put(end, kEndSig, 4), put(end, 0, 2), put(end, 0, 2), put(end, arrays.size(), 2), put(end, arrays.size(), 2);
  put(end, central.size(), 4), put(end, cd_offset, 4), put(end, 0, 2);
  out.write(central + end);
  out.commit();
}

std::map<std::string, Tensor> load_npz(const std::string& path) {
  File f;
  open_read(f, path, "load_npz");
  const std::string where = "load_npz: '" + path + "'";
  const std::uint64_t size = file_size(f.f, where);
  std::map<std::string, Tensor> out;
  for (const ZipEntry& z : read_central_directory(f.f, size, where)) {
    if (z.name.size() < 4 || z.name.compare(z.name.size() - 4, 4, ".npy") != 0) continue;  // not an array
    const std::string key = z.name.substr(0, z.name.size() - 4);
    const std::string at = where + ", entry '" + z.name + "'";
    if (out.count(key)) throw ValueError(msg(at, ": the archive holds it twice"));
    unsigned char local[30];
    Source{f.f, 0, size, nullptr}.read(z.offset, local, 30, at, "its local header");
    if (le(local, 4) != kLocalSig) throw ValueError(msg(at, ": corrupt zip (no local header at byte ", z.offset, ")"));
    const std::uint64_t data = z.offset + 30 + le(local + 26, 2) + le(local + 28, 2);
    if (data > size || z.csize > size - data)
      throw ValueError(msg(at, ": truncated: ", z.csize, " bytes at byte ", data, " of a ", size, "-byte file"));
    std::uint32_t crc = 0;
    if (z.method == 0) {
      if (z.usize != z.csize) throw ValueError(msg(at, ": stored entry with different sizes"));
      const Source src{f.f, data, z.csize, nullptr};
      out[key] = parse_npy(src, at);
      std::string chunk(std::min<std::uint64_t>(z.csize, 1 << 20), '\0');
      for (std::uint64_t p = 0; p < z.csize; p += chunk.size()) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), z.csize - p));
        src.read(p, chunk.data(), n, at, "the data");
        crc = crc_of(crc, chunk.data(), n);
      }
    } else if (z.method == 8) {
      // Deflate cannot expand more than about 1032:1: a larger claim is a corrupt or hostile entry.
      if (z.usize / 1032 > z.csize + 1)
        throw ValueError(msg(at, ": claims ", z.usize, " bytes from ", z.csize, " compressed (impossible for deflate)"));
      std::string packed(z.csize, '\0'), plain(z.usize, '\0');
      Source{f.f, data, z.csize, nullptr}.read(0, packed.data(), packed.size(), at, "the compressed data");
      z_stream zs{};
      if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) throw MemoryError(msg(at, ": zlib could not start inflating"));
      std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
      zs.next_in = reinterpret_cast<Bytef*>(packed.data());
      zs.next_out = reinterpret_cast<Bytef*>(plain.data());
      std::uint64_t in_left = packed.size(), out_left = plain.size();
      int rc = Z_OK;
      while (rc == Z_OK) {
        const uInt in_now = static_cast<uInt>(std::min<std::uint64_t>(in_left, 1u << 30));
        const uInt out_now = static_cast<uInt>(std::min<std::uint64_t>(out_left, 1u << 30));
        zs.avail_in = in_now, zs.avail_out = out_now;
        rc = inflate(&zs, Z_NO_FLUSH);
        in_left -= in_now - zs.avail_in, out_left -= out_now - zs.avail_out;
        if (rc == Z_OK && in_now == zs.avail_in && out_now == zs.avail_out) rc = Z_BUF_ERROR;  // no progress
      }
      if (rc != Z_STREAM_END || out_left != 0)
        throw ValueError(msg(at, ": corrupt deflate data (zlib: ", zs.msg ? zs.msg : std::to_string(rc), ")"));
      crc = crc_of(0, plain.data(), plain.size());
      out[key] = parse_npy(Source{nullptr, 0, plain.size(), &plain}, at);
    } else {
      throw ValueError(msg(at, ": compression method ", z.method, " is not supported (stored and deflate are)"));
    }
    if (crc != z.crc) throw ValueError(msg(at, ": CRC mismatch (the data is corrupt)"));
  }
  return out;
}

// ---- shared variables ---------------------------------------------------------------

void save_shared(const std::string& path, const std::vector<SharedVar>& vars) {
  std::map<std::string, Tensor> arrays;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const std::string& name = vars[i].name();
    if (name.empty()) throw ValueError(msg("save_shared: variable ", i, " has no name; name it (shared(value, \"w\"))"));
    if (arrays.count(name)) throw ValueError(msg("save_shared: two variables are named '", name, "'"));
    arrays.emplace(name, vars[i].get_value());
  }
  save_npz(path, arrays);
}

void load_shared(const std::string& path, const std::vector<SharedVar>& vars) {
  const auto arrays = load_npz(path);
  std::vector<const Tensor*> values;
  for (const auto& v : vars) {
    auto it = arrays.find(v.name());
    if (v.name().empty() || it == arrays.end()) {
      std::vector<std::string> names;
      for (const auto& a : arrays) names.push_back("'" + a.first + "'");
      std::string list;
      for (std::size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + names[i];
      throw ValueError(msg("load_shared: '", path, "' has no array named '", v.name(), "' (it holds ",
                           list.empty() ? "none" : list, ")"));
    }
    const TensorType& want = v.type();
    const Tensor& got = it->second;
    if (got.dtype() != want.dtype)
      throw TypeError(msg("load_shared: '", path, "': array '", v.name(), "' is ", dtype_name(got.dtype()),
                          shape_to_string(got.shape()), " but the variable is ", want.to_string()));
    if (got.shape() != want.shape)
      throw ShapeError(msg("load_shared: '", path, "': array '", v.name(), "' is ", dtype_name(got.dtype()),
                           shape_to_string(got.shape()), " but the variable is ", want.to_string()));
    values.push_back(&got);
  }
  for (std::size_t i = 0; i < vars.size(); ++i) SharedVar(vars[i]).set_value(*values[i]);
}

}  // namespace convgraph
