#pragma once
/// Pieces shared by convgraph-bench (the main job) and convgraph-anchors: the layer-file
/// format and the built-in layer sets, timing statistics, the FMA peak and bandwidth
/// probes, JSON files and the machine description,
/// and (bench_common_conv.cpp) one convolution problem with its buffers, its candidates,
/// the timing of one candidate and the error check against the reference.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>  // users of Json include <nlohmann/json.hpp>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/conv/conv_params.hpp"
#include "convgraph/optimizer/mode.hpp"

namespace convgraph::bench {

/// A bad command line, layer line or flag: reported as one message, exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- layers ------------------------------------------------------------------------

/// One line of a layer file: name N C K spatial kernel stride pad dilation groups.
struct Layer {
  std::string name;
  std::int64_t N = 1, C = 1, K = 1, groups = 1;
  std::vector<std::int64_t> spatial, kernel, stride, pad, dilation;  ///< one per axis
  std::string where;  ///< "layers.txt:12", for messages

  int ndim() const { return static_cast<int>(spatial.size()); }
  std::vector<std::int64_t> x_shape() const;  ///< (N, C, spatial...)
  std::vector<std::int64_t> w_shape() const;  ///< (K, C/groups, kernel...)
  ConvParams params() const;  ///< cross-correlation (oneDNN's convention), symmetric pads
  std::string describe() const;  ///< "N=8 C=64 K=64 56x56 k3x3 s1x1 p1x1 d1x1 g1"
};

/// The standard set (benchmarks/layers.txt) and the quick suite, in the file format.
extern const char* const kStandardLayers;
extern const char* const kQuickLayers;

/// Parses layer-file text; `source` names it in errors. Throws UsageError on any bad line
/// ("layers.txt:7: kernel '3x3x3' has 3 axes, spatial '56x56' has 2").
std::vector<Layer> parse_layers(std::string_view text, const std::string& source);
std::vector<Layer> read_layer_file(const std::string& path);
/// "fwd,bwd_data,bwd_filter" (also forward/grad_inputs/grad_weights, "all").
std::vector<ConvDirection> parse_directions(std::string_view text);
/// Strict integer parse of a layer-file column; throws UsageError naming `what`.
std::int64_t parse_int(std::string_view text, const std::string& what, std::int64_t lo, std::int64_t hi);

// ---- statistics and timing ------------------------------------------------------------

struct Stats {
  double median = 0, min = 0, max = 0;  ///< seconds
  int runs = 0;
};
Stats summarize(std::vector<double> seconds);
double now_seconds();  ///< steady clock
double geometric_mean(const std::vector<double>& values);  ///< 0 for an empty list
/// 1-minute load average (/proc/loadavg), -1 when unknown: a busy shared machine makes
/// every figure unreliable, so both benchmarks print it.
double load_average();

// ---- machine peak ---------------------------------------------------------------------

struct PeakResult {
  double gflops_1t = 0;  ///< one thread
  double gflops = 0;     ///< `threads` threads, all FMAs
  int threads = 1;
  std::string isa;       ///< "avx512" or "avx2"
};
/// Measures FP32 FMA throughput with register-resident FMA chains on `threads` threads
/// (AVX-512 and AVX2 both tried where the CPU has them; the faster counts) for about
/// `seconds` per measurement.
PeakResult measure_peak(int threads, double seconds = 0.25);
/// Sustained memory bandwidth in GB/s: a STREAM-style triad (a = b + s * c) over arrays
/// well beyond the caches on `threads` threads, best of a few passes of about `seconds`
/// in all. Counts the three arrays' bytes (reads of b and c, the write of a).
double measure_bandwidth(int threads, double seconds = 0.3);
/// The round trip of one cache line between two threads (two atomic hand-offs), ns: the
/// median of a few batches. On these VMs it tells the host's vCPU placement apart: 50-110
/// ns when the two vCPUs share an L3, about 350 ns when they do not, and then every
/// library's two-thread timings slow down (by up to 3x on kernels whose threads exchange
/// data). NaN on a single-CPU machine.
double core_round_trip_ns();

// ---- records: JSON and the machine --------------------------------------------------------

/// Every JSON the benchmarks write or read goes through nlohmann-json; ordered, so a record's
/// members keep the order they were added in. NaN and infinities are written as null.
using Json = nlohmann::ordered_json;
/// Writes `j` indented to `path` (text that is not UTF-8 becomes U+FFFD); throws UsageError
/// when the file cannot be written.
void write_json_file(const std::string& path, const Json& j);
/// Parses the JSON file at `path`; throws UsageError naming the file and the parse error.
Json read_json_file(const std::string& path);
/// Writes `text` to `path`; throws UsageError when the file cannot be written.
void write_text_file(const std::string& path, const std::string& text);

/// Where a run happened, for the records: enough to tell two machines, builds and load
/// conditions apart when comparing files.
struct MachineInfo {
  std::string host;        ///< gethostname()
  std::string cpu_model;   ///< /proc/cpuinfo "model name" ("unknown" elsewhere)
  std::string isa;         ///< CPU kernel level in use ("avx512")
  std::string isa_detected;  ///< best level this CPU supports
  std::string version;     ///< convgraph::version()
  int hardware_threads = 0;
  double load_average[3] = {-1, -1, -1};  ///< 1, 5, 15 minutes (/proc/loadavg)
  std::string date;        ///< UTC, ISO 8601
};
MachineInfo machine_info();
Json to_json(const MachineInfo& m);
/// The source commit convgraph-bench was built from (`git describe --always --dirty`,
/// taken at build time; convgraph_bench_commit.cpp), "unknown" outside a git checkout.
const char* git_commit();

// ---- convolution workloads (bench_common_conv.cpp) -------------------------------------

/// Operand memory from the library's host allocator (allocate_host), as a Function's
/// tensors get it: large buffers on transparent huge pages where the kernel allows.
struct Buffer {
  std::shared_ptr<void> own;
  float* data = nullptr;
  std::size_t size = 0;
};
Buffer alloc_buffer(std::size_t floats);
void fill_random(Buffer& b, std::uint64_t seed);  ///< uniform in [-1, 1)

/// One layer in one direction: the problem, its operands (inputs random, the written one
/// left for the algorithm) and the input-side tensors in ConvTensors form.
struct Workload {
  Layer layer;
  ConvProblem problem;
  Buffer x, w, y;                                ///< host copies (the check reads these)
  DeviceKind device = DeviceKind::cpu;           ///< where the algorithms run
  std::shared_ptr<Storage> on_device[3];         ///< x, w, y mirrors when device != cpu
  /// The operands as the algorithm sees them (device pointers on a GPU).
  ConvTensors tensors() const;
  float* output() const;       ///< the operand the direction writes
  std::size_t output_size() const;
};
/// Builds the fp32 problem (workspace limit from `mode`); throws UsageError naming the
/// layer when the geometry is invalid.
ConvProblem make_problem(const Layer& layer, ConvDirection d, const Mode& mode);
/// Random operands on the host, mirrored on mode.device (the GPU) when that is not the CPU.
Workload make_workload(const Layer& layer, ConvDirection d, const Mode& mode, std::uint64_t seed);

/// One algorithm of the device as the bench sees it.
struct Candidate {
  std::shared_ptr<const ConvAlgorithm> algorithm;
  bool eligible = false;   ///< a meta-optimizer candidate: may be chosen
  bool timed = false;      ///< will be run (eligible, or an alternative under --all-algorithms)
  std::string reason;      ///< why it is not run / not eligible
  std::size_t workspace = 0;
  /// What fast_run would lower the layer to without tuning (priority lowering with the
  /// cost model, optimizer/conv_lowering.hpp), so the bench can rate the default.
  bool default_choice = false;
  /// The cost model's estimate (ConvAlgorithm::estimated_seconds on this machine's
  /// measured model), in ms; NaN where the algorithm has none.
  double estimated_ms = NAN;
};
/// The meta-optimizer's candidates for `p` under `mode` (optimizer/conv_lowering.hpp's
/// meta_candidates: same selection semantics as conv_meta); with `all_algorithms` the
/// alternatives (every non-reference algorithm that is applicable) are timed too, but only
/// eligible ones may be chosen. The reference is never listed.
std::vector<Candidate> list_candidates(const Layer& layer, const ConvProblem& p, const Mode& mode,
                                       bool all_algorithms);

/// The oracle on a channel/batch subset of the problem small enough to run quickly.
struct ErrorCheck {
  ConvProblem sub;          ///< the subset problem the reference solved
  Buffer want;              ///< reference output of the subset
  std::string description;  ///< "n<1, k<16 of 64 (1.6% of outputs)"
  double fraction = 1;      ///< checked outputs / all outputs
};
/// Runs reference_conv (float64 accumulation) on a subset of `wl` whose cost is at most
/// about `max_flops` (0 = the whole problem), on the same data.
ErrorCheck make_error_check(const Workload& wl, double max_flops);

struct CheckResult {
  double max_abs_err = 0, rel_err = 0;  ///< rel: relative to the largest |reference|
  bool ok = false;                      ///< within the meta-optimizer's tolerance
  std::string detail;
};
/// Compares the written operand of `wl` (as left by the last run) with the check, on the
/// check's subset: the subset keeps every summed term, so the comparison is exact.
CheckResult check_output(const Workload& wl, const ErrorCheck& check);

struct Timing {
  Stats stats;
  std::vector<double> samples;  ///< every timed run, seconds, in run order (the warm-up when early-stopped)
  bool early_stopped = false;  ///< only the warm-up was timed (much slower than the best)
};
/// Warm-up + `repeats` timed runs of `algo` on `wl` (its output is first filled with NaN so
/// a stale result cannot pass the check). On a GPU each run is synchronised, and the
/// output is copied back to the host copy afterwards for check_output(). With early_stop > 0 and a best time known, a
/// warm-up slower than early_stop * best ends the timing. Rethrows what run() throws.
Timing time_algorithm(const Workload& wl, const ConvAlgorithm& algo, std::size_t workspace,
                      ThreadPool* pool, int repeats, double early_stop = 0, double best = 0);

/// "12.3 MiB", "0 B".
std::string bytes_text(double bytes);

}  // namespace convgraph::bench
