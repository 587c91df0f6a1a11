#pragma once
/// The meta-optimizer (conv_meta): times every applicable candidate algorithm for a
/// convolution on random data of its real shapes, checks each result against the
/// reference, keeps the fastest, and remembers the choice in a persistent tuning cache.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "convgraph/optimizer/conv_impl_op.hpp"
#include "convgraph/optimizer/conv_lowering.hpp"

namespace convgraph {

class ThreadPool;

/// Where timings come from. The default is std::chrono::steady_clock; tests inject a fake
/// clock that their fake algorithms advance, so "which is fastest" is under their control.
class MetaClock {
 public:
  virtual ~MetaClock() = default;
  /// Monotonic time in seconds.
  virtual double now() = 0;
};
std::shared_ptr<MetaClock> steady_meta_clock();

/// One remembered decision.
struct TuningEntry {
  std::string algorithm;  ///< winner's name
  int version = 0;        ///< winner's ConvAlgorithm::version() when it was timed
  double seconds = 0;     ///< its median time
  bool operator==(const TuningEntry&) const = default;
};

/// The persistent tuning cache: a text file
/// \code{.unparsed}
///   convgraph-tuning-cache v1
///   <device>\t<problem key>\t<candidates>\t<algorithm>\t<version>\t<seconds>
///   ...
///   end <entry count>
/// \endcode
/// keyed by device fingerprint, ConvProblem::key() (dtypes, workspace limit) and the
/// candidate set with each candidate's version. CRLF line endings are read as LF.
///
/// What is at the path decides what happens to it:
///  - nothing: created at the first save;
///  - a convgraph cache (a regular file starting with the header, at most kMaxBytes):
///    read; a corrupt, truncated, empty or other-version one is ignored with a warning
///    and replaced at the next save;
///  - anything else (a directory, FIFO, device, socket, a file without the header, an
///    unreadable or oversized file): refused with a warning naming the path and what it
///    is, never opened for writing, never replaced; tuning then proceeds in memory only.
///    FIFOs and devices are never read (stat first; the open is O_NONBLOCK and re-checked
///    with fstat), and reads stop at kMaxBytes.
/// A symbolic link is followed: its target is read and replaced, the link kept.
/// save() merges with what is on disk under an flock on "<path>.lock" and replaces the
/// file atomically (temporary file "<path>.tmp.<host>.<pid>.XXXXXX" in the same folder,
/// fsync, rename), so concurrent writers never corrupt it. Temporary files only exist
/// while their writer holds the lock, so a writer that holds it removes every temporary
/// left by a killed writer: those of this host whose pid no longer exists, and any
/// (another host's, an unparsable name) older than kStaleTempSeconds.
class TuningCache {
 public:
  static constexpr int kFormatVersion = 1;
  /// Largest file read or written (about 40 000 entries).
  static constexpr std::size_t kMaxBytes = std::size_t{8} << 20;
  /// Age after which a temporary file whose writer cannot be checked counts as stale.
  static constexpr int kStaleTempSeconds = 600;
  using Warn = std::function<void(const std::string&)>;
  using Entries = std::map<std::string, TuningEntry>;

  /// An empty path keeps entries in memory only.
  explicit TuningCache(std::string path, Warn warn = {});
  /// $XDG_CACHE_HOME/convgraph/tuning.txt, else $HOME/.cache/convgraph/tuning.txt,
  /// else a file in the temporary folder.
  static std::string default_path();
  /// The file a mode uses: metaopt.cache, the default for "", or "" (memory only) for "None".
  static std::string path_for(const std::string& metaopt_cache);

  const std::string& path() const { return path_; }
  /// (Re)reads the file. A missing file is an empty cache; a bad one is warned about.
  void load();
  /// Why the last load() ignored or refused the file; empty when it was fine or missing.
  const std::string& load_error() const { return load_error_; }
  /// True when what is at the path is not a convgraph cache: it is left alone and
  /// save() keeps entries in memory only.
  bool refused() const { return refused_; }
  const TuningEntry* find(const std::string& key) const;
  /// The entries as last read or written (without those pending a save).
  const Entries& entries() const { return entries_; }
  void put(const std::string& key, TuningEntry entry);
  bool dirty() const { return !pending_.empty(); }
  std::size_t size() const;
  /// Writes the pending entries (see the class comment). Failures (read-only folder...)
  /// are warned about, never thrown: the cache only saves time.
  void save();

  static std::string make_key(std::string_view device, const ConvProblem& p,
                              const std::vector<AlgorithmPtr>& candidates);
  /// Parses a whole file; false with `error` set when it is not a complete, valid cache.
  static bool parse(const std::string& text, Entries& out, std::string& error);
  static std::string serialize(const Entries& entries);

 private:
  void warn(const std::string& text) const;
  std::string path_;
  Warn warn_;
  Entries entries_;  ///< as last read or written
  Entries pending_;  ///< new since then
  std::string load_error_;
  bool refused_ = false;
};

/// "cpu Intel(R) Xeon(R) ... threads=2", "cuda NVIDIA H200 cudnn 90100": the device part
/// of a tuning key.
std::string device_fingerprint(DeviceKind device, int threads);

/// Moving tuned choices between machines. A tuning-cache entry holds the fingerprint of
/// the device it was timed on; two machines match when their CPU model (any thread
/// count: each entry keeps its own) or their GPU and cuDNN version are the same.
///
/// export_tuning writes this machine's entries of the cache at `cache_path` (default: the
/// default cache) to `path`, in the tuning-cache format, and returns how many.
/// import_tuning merges such a file into the cache at `cache_path` and returns how many
/// entries it brought. A file tuned on another machine is refused as a whole: ValueError
/// naming its fingerprint and this machine's; so are a file that is not a complete
/// tuning cache and a cache that cannot be written.
std::size_t export_tuning(const std::string& path, const std::string& cache_path = TuningCache::default_path());
std::size_t import_tuning(const std::string& path, const std::string& cache_path = TuningCache::default_path());

/// Settings of one tuning run.
struct TuneOptions {
  double budget_seconds = 10;  ///< per node; candidates past it are skipped (one always runs)
  int min_runs = 3;            ///< timed runs after the warm-up; the median is kept
  int max_runs = 9;            ///< more runs while a candidate is fast (< 20 ms in total)
  double early_stop = 10;      ///< stop timing a candidate whose warm-up is this much slower than the best
  /// A runner-up within confirm_margin x the leader's median is timed again with it in
  /// confirm_rounds alternating rounds (min_runs runs each), and the medians of those runs
  /// decide: one burst of runs per candidate can land in a slow spell of a shared machine.
  /// So is a slower candidate one of whose runs beat the leader's median
  /// (confirm_challenger).
  /// Only when the rounds, at the first pass's medians, fit in what is left of the budget;
  /// if a run fails there, the first pass decides.
  double confirm_margin = 1.3;
  int confirm_rounds = 3;
  int verbose = 0;
  std::function<void(const std::string&)> log;  ///< verbose lines
  MetaClock* clock = nullptr;                   ///< nullptr = steady clock
  ThreadPool* pool = nullptr;                   ///< nullptr = the default pool
  TuningCache* cache = nullptr;                 ///< nullptr = no cache
  std::string device;                           ///< device fingerprint for the cache key
};

struct TuneOutcome {
  AlgorithmPtr winner;  ///< null when no candidate could be timed
  std::string why;      ///< "timing: 1.2 ms, fastest of 3" or "cache hit: ..."
  bool cache_hit = false;
  double seconds = 0;   ///< winner's median time
  int timed = 0;        ///< candidates timed in this call
};

/// A close call timed again: `rounds` alternating rounds of time_runs(0) and time_runs(1)
/// (the leader first in even rounds, the runner-up first in odd ones), each returning the
/// run times of one burst; the medians of all of 0's and of all of 1's runs. tune_conv
/// decides close calls with it, and convgraph-anchors chooses as tune_conv does. Throws
/// what time_runs throws.
std::pair<double, double> alternating_medians(int rounds, const std::function<std::vector<double>(int)>& time_runs);

/// Which candidate to time again against the leader (alternating_medians): medians[i] and
/// fastest[i] are candidate i's median and fastest run, the leader (lowest median) first.
/// The runner-up when its median is within `margin` x the leader's; else the first
/// candidate one of whose runs beat the leader's median, since a slow spell of a shared
/// machine can hold back most of one candidate's burst (on the 2-vCPU VMs, every call
/// 4-8x slower for about 100 ms at a time, one thread or two); -1 for none.
int confirm_challenger(const std::vector<double>& medians, const std::vector<double>& fastest, double margin);

/// Tunes one problem among `candidates` (their verdicts: declined ones are only reported).
TuneOutcome tune_conv(const ConvProblem& p, const ConvCandidates& candidates, const std::string& label,
                      const TuneOptions& options);

}  // namespace convgraph
