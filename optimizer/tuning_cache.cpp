// The persistent tuning cache: parsing, validation and atomic, merged, locked writes.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

bool read_file(const std::string& path, std::string& text, bool& exists) {
  std::ifstream in(path, std::ios::binary);
  exists = static_cast<bool>(in);
  if (!in) return errno == ENOENT;
  std::ostringstream ss;
  ss << in.rdbuf();
  text = ss.str();
  return true;
}

std::string errno_text() { return std::strerror(errno); }

/// Serialises writers, in this process and across processes: an flock on a side file
/// (locking the cache file itself would not survive the rename that replaces it).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
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
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

/// Writes `text` to a fresh temporary file next to `path`, syncs it, renames it over
/// `path` and syncs the folder. Returns an error text, empty on success.
std::string write_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::string tmpl = (target.parent_path() / (target.filename().string() + ".tmp.XXXXXX")).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
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

bool TuningCache::parse(const std::string& text, Entries& out, std::string& error) {
  out.clear();
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
  if (path_.empty()) return;
  std::string text;
  bool exists = false;
  if (!read_file(path_, text, exists)) {
    load_error_ = "cannot be read: " + errno_text();
    warn("tuning cache " + path_ + " " + load_error_ + "; starting with an empty cache");
    return;
  }
  if (!exists) return;
  Entries parsed;
  if (!parse(text, parsed, load_error_)) {
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
  if (path_.empty()) {  // memory only
    for (auto& [k, e] : pending_) entries_[k] = e;
    pending_.clear();
    return;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path parent = fs::path(path_).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) {
    warn("tuning cache " + path_ + ": cannot create " + parent.string() + ": " + ec.message() + "; not saved");
    return;
  }
  std::lock_guard<std::mutex> in_process(save_mutex());
  FileLock lock(path_ + ".lock");
  if (!lock.ok()) {
    warn("tuning cache " + path_ + ": cannot lock " + path_ + ".lock: " + errno_text() + "; not saved");
    return;
  }
  // Merge with what other processes wrote since we loaded; a bad file is replaced.
  Entries merged;
  std::string text, error;
  bool exists = false;
  if (read_file(path_, text, exists) && exists && !parse(text, merged, error)) merged.clear();
  for (const auto& [k, e] : pending_) merged[k] = e;
  if (const std::string err = write_atomically(path_, serialize(merged)); !err.empty()) {
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

}  // namespace convgraph
