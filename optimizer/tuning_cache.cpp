// The persistent tuning cache: parsing, validation, safe reads (regular convgraph caches
// only, bounded) and atomic, merged, locked writes that clean up after killed writers.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "convgraph/backends/cuda.hpp"
#include "convgraph/optimizer/meta_optimizer.hpp"
#include "optimizer/text_util.hpp"

namespace convgraph {

namespace {

constexpr std::string_view kMagic = "convgraph-tuning-cache";
constexpr std::size_t kFields = 6;  // device, problem, candidates, algorithm, version, seconds

std::string header_line() { return std::string(kMagic) + " v" + std::to_string(TuningCache::kFormatVersion); }

/// Keys and names never contain the separators; anything odd becomes '_'.
std::string sanitize(std::string_view s) {
  std::string r(s);
  for (auto& c : r)
    if (c == '\t' || c == '\n' || c == '\r') c = '_';
  return r;
}

std::string errno_text(int e = errno) { return std::strerror(e); }

/// "a directory", "a FIFO (named pipe)"...: what a non-regular file is, for messages.
std::string kind_text(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

std::string mib_text(std::size_t bytes) { return msg(bytes >> 20, " MiB"); }

/// What is at a cache path, and its text when it could be read.
struct Probe {
  enum Kind {
    missing,  ///< nothing there: write a new cache
    cache,    ///< a regular file starting with the header (valid or not: parse decides)
    refused,  ///< anything else: never read further, never replaced
  } kind = missing;
  std::string text;  ///< the file's text (kind == cache)
  std::string why;   ///< what it is (kind == refused)
};

/// Looks at `path` without ever blocking or reading without bound: stat first (a FIFO or
/// device is never opened), then an O_NONBLOCK open re-checked with fstat (the path may
/// have changed in between), then at most TuningCache::kMaxBytes + 1 bytes.
Probe probe_path(const std::string& path) {
  Probe r;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    struct stat lst {};
    if (e == ENOENT && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      r.kind = Probe::refused;
      r.why = "it is a symbolic link to a missing file";
    } else if (e != ENOENT && e != ENOTDIR) {  // ENOTDIR: a folder on the way is a file; save() says so
      r.kind = Probe::refused;
      r.why = "it cannot be examined: " + errno_text(e);
    }
    return r;
  }
  r.kind = Probe::refused;
  if (!S_ISREG(st.st_mode)) {
    r.why = "it is " + kind_text(st.st_mode) + ", not a regular file";
    return r;
  }
  constexpr std::size_t cap = TuningCache::kMaxBytes;
  if (static_cast<std::size_t>(st.st_size) > cap) {
    r.why = msg("it is ", st.st_size, " bytes, more than the ", mib_text(cap), " a tuning cache may have");
    return r;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    r.why = "it cannot be opened for reading: " + errno_text();
    return r;
  }
  struct stat fst {};
  if (::fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
    r.why = "it is " + kind_text(fst.st_mode) + ", not a regular file";
    ::close(fd);
    return r;
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.why = "it cannot be read: " + errno_text();
      ::close(fd);
      return r;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > cap) {
      r.why = msg("it is larger than the ", mib_text(cap), " a tuning cache may have");
      ::close(fd);
      return r;
    }
  }
  ::close(fd);
  // Ours: empty (nothing to lose), or starting with the header (or a prefix of it).
  const std::size_t n = std::min(text.size(), kMagic.size());
  if (text.compare(0, n, kMagic.data(), n) != 0) {
    const std::string first = text.substr(0, std::min(text.find('\n'), std::size_t{60}));
    std::string shown;
    for (const char c : first) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
    r.why = "it is not a convgraph tuning cache (it starts with '" + shown + "', not '" + std::string(kMagic) + "')";
    return r;
  }
  r.kind = Probe::cache;
  r.text = std::move(text);
  return r;
}

/// "<dir>/<name>.tmp.": the prefix of every temporary file of a cache path.
std::string temp_prefix(const std::string& path) {
  const std::filesystem::path p(path);
  return p.filename().string() + ".tmp.";
}

std::string host_tag() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !*host) return "localhost";
  std::string h = host;
  for (auto& c : h)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';  // no '.' in the tag
  return h;
}

/// Removes temporary files a killed writer left next to `path`. Called with the writers'
/// lock held: every live writer creates and renames its temporary under that lock, so
/// any temporary present now is a leftover. Still, as a guard against a lock that is not
/// shared (NFS without lock support, a foreign tool): a name "<host>.<pid>.XXXXXX" of
/// this host is removed only when that pid no longer exists (or is this process, which
/// holds the lock); any other name only when older than kStaleTempSeconds.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = temp_prefix(path);
  const std::string mine = host_tag() + ".";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const std::string rest = name.substr(prefix.size());
    bool stale = std::difftime(std::time(nullptr), st.st_mtime) > TuningCache::kStaleTempSeconds;
    if (!stale && rest.rfind(mine, 0) == 0) {
      const std::string pid_text = rest.substr(mine.size(), rest.find('.', mine.size()) - mine.size());
      char* endp = nullptr;
      const long pid = std::strtol(pid_text.c_str(), &endp, 10);
      if (!pid_text.empty() && *endp == '\0' && pid > 0)
        stale = pid == static_cast<long>(::getpid()) ||
                (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
    }
    if (stale) ::unlink(it->path().c_str());
  }
}

/// Serialises writers, in this process and across processes: an flock on a side file
/// (locking the cache file itself would not survive the rename that replaces it). The
/// lock file must be a regular file (never a FIFO or device someone put there).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      error_ = errno_text();
      return;
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      error_ = "it is " + kind_text(st.st_mode) + ", not a regular file";
      ::close(fd_);
      fd_ = -1;
      return;
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        error_ = errno_text();
        ::close(fd_);
        fd_ = -1;
        return;
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
  std::string error_;
};

/// Writes `text` to a fresh temporary file next to `path`, syncs it, renames it over
/// `path` and syncs the folder. Returns an error text, empty on success.
std::string write_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string tmpl =
      (target.parent_path() / (temp_prefix(path) + host_tag() + "." + std::to_string(::getpid()) + ".XXXXXX")).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) return "cannot create a temporary file next to it: " + errno_text();
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = errno_text();
      ::close(fd);
      ::unlink(name.data());
      return "write failed: " + err;
    }
    done += static_cast<std::size_t>(n);
  }
  ::fchmod(fd, 0644);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(name.data());
    return "fsync failed: " + errno_text();
  }
  if (::rename(name.data(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(name.data());
    return "rename failed: " + err;
  }
  const std::string dir = target.parent_path().empty() ? "." : target.parent_path().string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // makes the rename itself durable
    ::close(dfd);
  }
  return {};
}

std::mutex& save_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

TuningCache::TuningCache(std::string path, Warn warn) : path_(std::move(path)), warn_(std::move(warn)) {}

std::string TuningCache::default_path() {
  namespace fs = std::filesystem;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/')
    return (fs::path(x) / "convgraph" / "tuning.txt").string();
  if (const char* h = std::getenv("HOME"); h && *h)
    return (fs::path(h) / ".cache" / "convgraph" / "tuning.txt").string();
  return (fs::temp_directory_path() / "convgraph" / "tuning.txt").string();
}

std::string TuningCache::path_for(const std::string& metaopt_cache) {
  if (metaopt_cache.empty()) return default_path();
  if (metaopt_cache == "None") return {};
  return metaopt_cache;
}

void TuningCache::warn(const std::string& text) const {
  if (warn_) warn_(text);
  else std::cerr << "convgraph: warning: " << text << '\n';
}

std::string TuningCache::make_key(std::string_view device, const ConvProblem& p,
                                  const std::vector<AlgorithmPtr>& candidates) {
  std::string set;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (i) set += ',';
    set += candidates[i]->name();
    set += '@';
    set += std::to_string(candidates[i]->version());
  }
  return sanitize(device) + '\t' + sanitize(p.key()) + '\t' + sanitize(set);
}

bool TuningCache::parse(const std::string& raw, Entries& out, std::string& error) {
  out.clear();
  // CRLF line endings (a file edited on Windows) read as LF: no key, name or number
  // ever holds a '\r' (sanitize), so dropping the one before each '\n' is unambiguous.
  std::string text;
  text.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i)
    if (!(raw[i] == '\r' && i + 1 < raw.size() && raw[i + 1] == '\n')) text += raw[i];
  if (text.empty()) {
    error = "the file is empty";
    return false;
  }
  if (text.back() != '\n') {
    error = "the file is truncated (its last line is incomplete)";
    return false;
  }
  const auto lines = split_text(std::string_view(text).substr(0, text.size() - 1), '\n');
  if (lines[0].rfind(kMagic, 0) != 0) {
    error = "not a convgraph tuning cache (first line '" + lines[0].substr(0, 60) + "')";
    return false;
  }
  if (lines[0] != header_line()) {
    error = "written by another format version ('" + lines[0] + "', this build reads '" + header_line() + "')";
    return false;
  }
  bool ended = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (ended) {
      error = msg("line ", i + 1, ": text after the end marker");
      return false;
    }
    if (line.rfind("end ", 0) == 0) {
      char* endp = nullptr;
      const unsigned long long n = std::strtoull(line.c_str() + 4, &endp, 10);
      if (*endp != '\0' || n != out.size()) {
        error = msg("line ", i + 1, ": end marker '", line, "' does not match the ", out.size(), " entries read");
        return false;
      }
      ended = true;
      continue;
    }
    const auto f = split_text(line, '\t');
    if (f.size() != kFields) {
      error = msg("line ", i + 1, ": expected ", kFields, " tab-separated fields, found ", f.size());
      return false;
    }
    for (const auto& field : f)
      if (field.empty()) {
        error = msg("line ", i + 1, ": empty field");
        return false;
      }
    char* endp = nullptr;
    errno = 0;
    const long version = std::strtol(f[4].c_str(), &endp, 10);
    if (*endp != '\0' || errno == ERANGE || version < 0 || version > 1000000) {
      error = msg("line ", i + 1, ": bad algorithm version '", f[4], "'");
      return false;
    }
    const double seconds = std::strtod(f[5].c_str(), &endp);
    if (*endp != '\0' || !std::isfinite(seconds) || seconds < 0) {
      error = msg("line ", i + 1, ": bad time '", f[5], "'");
      return false;
    }
    const std::string key = f[0] + '\t' + f[1] + '\t' + f[2];
    if (!out.emplace(key, TuningEntry{f[3], static_cast<int>(version), seconds}).second) {
      error = msg("line ", i + 1, ": duplicate key");
      return false;
    }
  }
  if (!ended) {
    error = "the file is truncated (no end marker)";
    return false;
  }
  return true;
}

std::string TuningCache::serialize(const Entries& entries) {
  std::ostringstream os;
  os.precision(9);
  os << header_line() << '\n';
  for (const auto& [key, e] : entries)
    os << key << '\t' << sanitize(e.algorithm) << '\t' << e.version << '\t' << e.seconds << '\n';
  os << "end " << entries.size() << '\n';
  return os.str();
}

void TuningCache::load() {
  load_error_.clear();
  entries_.clear();
  refused_ = false;
  if (path_.empty()) return;
  Probe pr = probe_path(path_);
  if (pr.kind == Probe::missing) return;
  if (pr.kind == Probe::refused) {
    refused_ = true;
    load_error_ = pr.why;
    warn("tuning cache " + path_ + " refused: " + pr.why +
         "; it is left alone and tuning results are kept in memory only (choose another metaopt.cache)");
    return;
  }
  Entries parsed;
  if (!parse(pr.text, parsed, load_error_)) {
    warn("tuning cache " + path_ + " ignored: " + load_error_ + "; it will be rewritten");
    return;
  }
  entries_ = std::move(parsed);
}

const TuningEntry* TuningCache::find(const std::string& key) const {
  if (auto it = pending_.find(key); it != pending_.end()) return &it->second;
  if (auto it = entries_.find(key); it != entries_.end()) return &it->second;
  return nullptr;
}

void TuningCache::put(const std::string& key, TuningEntry entry) { pending_[key] = std::move(entry); }

std::size_t TuningCache::size() const {
  std::size_t n = entries_.size();
  for (const auto& [k, e] : pending_) n += entries_.count(k) ? 0 : 1;
  return n;
}

void TuningCache::save() {
  if (pending_.empty()) return;
  auto keep_in_memory = [this] {
    for (auto& [k, e] : pending_) entries_[k] = e;
    pending_.clear();
  };
  if (path_.empty() || refused_) return keep_in_memory();  // a refusal was warned about by load()
  namespace fs = std::filesystem;
  std::error_code ec;
  // A symbolic link is kept: its target is what gets replaced.
  std::string target = path_;
  if (fs::is_symlink(path_, ec)) {
    const fs::path real = fs::canonical(path_, ec);
    if (ec) {
      warn("tuning cache " + path_ + " refused: it is a symbolic link that cannot be resolved (" + ec.message() +
           "); not saved");
      refused_ = true;
      return keep_in_memory();
    }
    target = real.string();
  }
  auto refuse = [&](const std::string& why) {
    warn("tuning cache " + path_ + " refused: " + why + "; it is left alone and tuning results are not saved");
    refused_ = true;
    keep_in_memory();
  };
  // Look before creating folders or the lock file (never "/dev/null.lock").
  if (Probe pr = probe_path(target); pr.kind == Probe::refused) return refuse(pr.why);
  const fs::path parent = fs::path(target).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) {
    warn("tuning cache " + path_ + ": cannot create " + parent.string() + ": " + ec.message() + "; not saved");
    return;
  }
  std::lock_guard<std::mutex> in_process(save_mutex());
  FileLock lock(target + ".lock");
  if (!lock.ok()) {
    warn("tuning cache " + path_ + ": cannot lock " + target + ".lock: " + lock.error() + "; not saved");
    return;
  }
  remove_stale_temporaries(target);
  // Merge with what other processes wrote since we loaded; a bad cache is replaced,
  // anything that is not a cache (it may have appeared since load()) is left alone.
  const Probe pr = probe_path(target);
  if (pr.kind == Probe::refused) return refuse(pr.why);
  Entries merged;
  std::string error;
  if (pr.kind == Probe::cache && !parse(pr.text, merged, error)) merged.clear();
  for (const auto& [k, e] : pending_) merged[k] = e;
  const std::string text = serialize(merged);
  if (text.size() > kMaxBytes) {
    warn(msg("tuning cache ", path_, ": ", merged.size(), " entries would take ", text.size(), " bytes, more than the ",
             mib_text(kMaxBytes), " a tuning cache may have; not saved (delete it to start afresh)"));
    return keep_in_memory();
  }
  if (const std::string err = write_atomically(target, text); !err.empty()) {
    warn("tuning cache " + path_ + ": " + err + "; not saved");
    return;
  }
  entries_ = std::move(merged);
  pending_.clear();
}

std::string device_fingerprint(DeviceKind device, int threads) {
  if (device == DeviceKind::cuda) {
    const auto& info = cuda_info();
    return msg("cuda ", info.device_name.empty() ? "unknown-gpu" : info.device_name, " cudnn ", info.cudnn_version);
  }
  static const std::string model = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("model name", 0) == 0) {
        const auto colon = line.find(':');
        if (colon != std::string::npos) return trim_text(line.substr(colon + 1));
      }
    return std::string("unknown-cpu");
  }();
  return msg("cpu ", model, " threads=", threads);
}

// ---- export and import ----------------------------------------------------------------

namespace {

/// The part of a device fingerprint two machines must share: the CPU model, or the GPU
/// and cuDNN version; the thread count is part of each entry's key instead.
std::string machine_part(std::string_view device) {
  const auto t = device.rfind(" threads=");
  return std::string(device.substr(0, device.rfind("cpu ", 0) == 0 && t != std::string_view::npos ? t : device.size()));
}

/// This machine's fingerprints: its CPU, and its GPU when one is usable.
std::vector<std::string> this_machine() {
  std::vector<std::string> out{machine_part(device_fingerprint(DeviceKind::cpu, 1))};
  if (cuda_info().available) out.push_back(device_fingerprint(DeviceKind::cuda, 0));
  return out;
}

std::string device_of(const std::string& key) { return key.substr(0, key.find('\t')); }

TuningCache::Entries read_tuning_file(const std::string& path, const char* who) {
  const Probe pr = probe_path(path);
  if (pr.kind == Probe::missing) throw ValueError(msg(who, ": '", path, "' does not exist"));
  if (pr.kind == Probe::refused) throw ValueError(msg(who, ": '", path, "' cannot be used: ", pr.why));
  TuningCache::Entries entries;
  std::string error;
  if (!TuningCache::parse(pr.text, entries, error)) throw ValueError(msg(who, ": '", path, "': ", error));
  return entries;
}

}  // namespace

std::size_t export_tuning(const std::string& path, const std::string& cache_path) {
  TuningCache::Entries all;
  if (probe_path(cache_path).kind != Probe::missing) all = read_tuning_file(cache_path, "export_tuning");
  const auto mine = this_machine();
  TuningCache::Entries out;
  for (const auto& [key, e] : all)
    if (std::find(mine.begin(), mine.end(), machine_part(device_of(key))) != mine.end()) out.emplace(key, e);
  if (const std::string err = write_atomically(path, TuningCache::serialize(out)); !err.empty())
    throw ValueError(msg("export_tuning: cannot write '", path, "': ", err));
  return out.size();
}

std::size_t import_tuning(const std::string& path, const std::string& cache_path) {
  const TuningCache::Entries in = read_tuning_file(path, "import_tuning");
  const auto mine = this_machine();
  for (const auto& [key, e] : in)
    if (std::find(mine.begin(), mine.end(), machine_part(device_of(key))) == mine.end())
      throw ValueError(msg("import_tuning: '", path, "' was tuned on another machine: its fingerprint is '",
                           machine_part(device_of(key)), "', this machine's is '", join_text(mine, "' and '"),
                           "'; nothing imported (tune here, or import a file exported on a matching machine)"));
  std::vector<std::string> problems;
  TuningCache cache(cache_path, [&problems](const std::string& w) { problems.push_back(w); });
  cache.load();
  if (cache.refused()) throw ValueError(msg("import_tuning: the tuning cache ", cache_path, ": ", cache.load_error()));
  for (const auto& [key, e] : in) cache.put(key, e);
  cache.save();
  // A corrupt old cache is replaced (only a warning); a cache that was not written is an error.
  const bool unsaved = cache.refused() || cache.dirty() ||
                       std::any_of(problems.begin(), problems.end(), [](const std::string& w) { return w.find("not saved") != std::string::npos; });
  if (unsaved) throw ValueError(msg("import_tuning: nothing imported: ", join_text(problems, "; ")));
  return in.size();
}

}  // namespace convgraph
