// convgraph-bench, the main job: for each layer and direction, time every candidate the
// meta-optimizer would time, check each result against the reference, and report the
// fastest. Tables go to stdout, progress to stderr (a terminal only), records to --json,
// --csv and --report.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "benchmarks/bench_cli.hpp"
#include "benchmarks/bench_common.hpp"
#include "benchmarks/bench_networks.hpp"
#include "benchmarks/bench_report.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph::bench {
namespace {

constexpr const char* kDescription = R"(convgraph-bench: times every convolution algorithm the meta-optimizer would consider, for each
layer and direction, checks each result against the float64-accumulating reference, and
marks the fastest correct one (the meta-optimizer's choice). fp32, NCHW, cross-correlation.
Tables go to stdout; an overall [i/N] progress line with an ETA to stderr when it is a
terminal.)";

constexpr const char* kFooter = R"(Exit status: 0 ok, 1 a candidate failed (wrong result or exception), 2 bad usage.)";

struct Options {
  std::string suite = "standard";
  std::string layers_file;
  std::vector<std::string> only;
  std::vector<ConvDirection> directions{ConvDirection::forward, ConvDirection::grad_inputs,
                                        ConvDirection::grad_weights};
  std::string flags;
  int all_algorithms = -1;  ///< -1: the suite's default
  int threads = 0;
  int repeats = 5;
  double early_stop = 10;
  double check_flops = 2e8;
  bool estimates_only = false;  ///< the cost model's estimates and fast_run's pick, nothing timed
  std::uint64_t seed = 1;
  std::string json, csv, report, anchors;
  std::vector<std::string> networks;  ///< --networks: whole networks instead of layers
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

/// Declares every option on `app`; `o` receives the values when app.parse() runs.
void add_options(CLI::App& app, Options& o) {
  app.add_option("--suite", o.suite,
                 "built-in layer set: standard (the 13 layers of benchmarks/layers.txt) or quick (small "
                 "layers, < 1 min)")
      ->check(CLI::IsMember({"standard", "quick"}))
      ->default_str("standard");
  app.add_option("--layers", o.layers_file,
                 "layers from FILE: name N C K spatial kernel stride pad dilation groups ('x'-separated axes, "
                 "'#' comments)")
      ->type_name("FILE");
  app.add_option_function<std::string>(
         "--only", [&o](const std::string& v) { o.only = split_list(v); }, "run only these layers of the set")
      ->type_name("NAME[,NAME...]");
  app.add_option_function<std::string>(
         "--directions", [&o](const std::string& v) { o.directions = parse_directions(v); },
         "fwd,bwd_data,bwd_filter (default: all three)")
      ->type_name("LIST");
  app.add_option("--flags", o.flags,
                 "the flag language, e.g. \"optimizer_excluding=conv_gemm\", "
                 "\"metaopt.optimizer_including=conv_fft\", \"workspace_limit=64M\"");
  auto* all = app.add_flag_callback(
      "--all-algorithms", [&o] { o.all_algorithms = 1; },
      "also time algorithms that are not meta candidates (never chosen); default for --suite quick");
  app.add_flag_callback(
         "--meta-only", [&o] { o.all_algorithms = 0; }, "time only meta candidates (default for the standard set)")
      ->excludes(all);
  app.add_option("--threads", o.threads,
                 "threads for algorithms and reference (default: CONVGRAPH_THREADS or all hardware threads)")
      ->check(CLI::Range(1, 1024))
      ->type_name("N");
  app.add_option("--repeats", o.repeats, "timed runs after one warm-up; the median is reported")
      ->check(CLI::Range(1, 100000))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--early-stop", o.early_stop,
                 "time only the warm-up of a candidate F times slower than the best so far, as the "
                 "meta-optimizer does (0: time all fully)")
      ->check(CLI::Range(0.0, 1e9))
      ->type_name("F")
      ->capture_default_str();
  app.add_option("--check-flops", o.check_flops,
                 "cost cap of the reference check: larger problems are checked on a batch/channel subset (0: "
                 "check everything)")
      ->check(CLI::Range(0.0, 1e18))
      ->type_name("F")
      ->capture_default_str();
  app.add_flag("--estimates-only", o.estimates_only,
               "time nothing: list each applicable algorithm's cost-model estimate and fast_run's default "
               "pick (seconds for a whole layer set; CONVGRAPH_MACHINE fixes the machine model)");
  app.add_option("--seed", o.seed, "random data seed")->type_name("N")->capture_default_str();
  app.add_option("--json", o.json,
                 "write the run: host, CPU model, ISA, version, commit, threads, load, and one record per "
                 "(layer, direction, algorithm) with every sample")
      ->type_name("FILE");
  app.add_option("--csv", o.csv, "write the records as CSV (one line per layer, direction and algorithm)")
      ->type_name("FILE");
  app.add_option("--report", o.report,
                 "write DIR/index.html: per-layer charts and a roofline against the measured peak and bandwidth "
                 "(measured at the end, about 2 s)")
      ->type_name("DIR");
  app.add_option("--anchors", o.anchors,
                 "a convgraph-anchors --json file: the report shows oneDNN's time next to the chosen algorithm")
      ->check(CLI::ExistingFile)
      ->type_name("FILE");
  app.add_option_function<std::string>(
         "--networks", [&o](const std::string& v) { o.networks = split_list(v); },
         "time whole networks instead of layers: lenet,resnet8,c3d_small (benchmarks/NETWORKS.md): a training "
         "step (forward, backward, SGD, batch-norm running averages) and inference, each in a fresh process; "
         "ms (median of --repeats after 2 warm-ups), images/s, peak resident-set growth, and the planner's "
         "arena")
      ->type_name("LIST");
}

std::vector<Layer> select_layers(const Options& o) {
  std::vector<Layer> all = !o.layers_file.empty() ? read_layer_file(o.layers_file)
                           : o.suite == "quick"    ? parse_layers(kQuickLayers, "<quick suite>")
                                                   : parse_layers(kStandardLayers, "<standard set>");
  if (o.only.empty()) return all;
  std::vector<Layer> out;
  for (const auto& name : o.only) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Layer& l) { return l.name == name; });
    if (it == all.end()) throw UsageError(msg("--only: no layer named '", name, "' in the set"));
    out.push_back(*it);
  }
  return out;
}

/// printf of numbers into a string (one table cell or line).
template <class... Numbers>
std::string fmt(const char* f, Numbers... v) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, static_cast<double>(v)...);
  return buf;
}

/// m:ss, or h:mm:ss.
std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

/// The overall "[i/N] layer direction: what  elapsed, ETA" line, redrawn in place on
/// stderr. Silent when stderr is not a terminal, so logs get the tables only. The ETA
/// weighs the steps by FLOPs: the layers of a set differ in cost a hundredfold.
class Progress {
 public:
  explicit Progress(std::vector<double> step_work)
      : enabled_(isatty(STDERR_FILENO) != 0), work_(std::move(step_work)), start_(now_seconds()) {
    for (double w : work_) total_ += w;
  }
  ~Progress() { clear(); }
  /// Shows `what` as the current activity of step `step` (0-based).
  void show(std::size_t step, const std::string& what) {
    if (!enabled_) return;
    const double elapsed = now_seconds() - start_;
    std::string line = msg("[", step + 1, "/", work_.size(), "] ", what, "  ", clock_text(elapsed), " elapsed");
    if (done_ > 0) line += ", ETA " + clock_text(elapsed * (total_ - done_) / done_);
    if (line.size() > 118) line = line.substr(0, 115) + "...";
    std::cerr << "\r\033[K" << line << std::flush;
  }
  void finish_step(std::size_t step) { done_ += work_[step]; }
  /// Erases the line (before anything else is written to the terminal).
  void clear() {
    if (enabled_) std::cerr << "\r\033[K" << std::flush;
  }

 private:
  bool enabled_;
  std::vector<double> work_;
  double total_ = 0, done_ = 0, start_;
};

/// Everything one run collects.
struct Report {
  std::vector<Record> records;
  std::vector<std::pair<std::string, std::vector<std::string>>> declined;  ///< per layer
  std::map<std::string, std::vector<double>> chosen_ms;  ///< direction -> chosen times
  std::map<std::string, std::vector<double>> default_ms; ///< direction -> fast_run's default's times (same layers)
  std::map<std::string, int> wins;                        ///< algorithm -> times chosen
  int failures = 0;
};

void print_table(const Workload& wl, const ErrorCheck& check, const std::vector<Record>& rows, std::ostream& os) {
  const ConvProblem& p = wl.problem;
  os << "\n== " << wl.layer.name << "  " << direction_name(p.direction) << "  " << wl.layer.describe() << "  "
     << fmt("%.3f", p.flops() * 1e-9) << " GFLOP\n"
     << "   error check: reference (float64 accumulation) on " << check.description << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "   %-18s %10s %9s %11s %12s %9s  %s\n", "algorithm", "median ms", "GFLOP/s",
                "workspace", "max abs err", "rel err", "note");
  os << line;
  int declined = 0;
  for (const Record& r : rows) {
    const char* mark = r.chosen ? " * " : "   ";
    if (r.status == "skipped") {  // listed once per layer, after its last table
      ++declined;
      continue;
    }
    if (r.status == "failed") {
      os << mark << r.algorithm << "  FAILED: " << r.reason << "\n";
      continue;
    }
    std::string note = r.chosen ? "chosen" : "";
    if (r.default_choice) note += note.empty() ? "fast_run default" : ", fast_run default";
    if (r.status == "wrong") note = "WRONG: " + r.reason;
    if (r.status == "early_stopped") note = "warm-up only (early stop)";
    if (!r.eligible && r.status != "wrong") note += (note.empty() ? "" : "; ") + r.reason;
    std::snprintf(line, sizeof line, "%s%-18s %10.3f %9.1f %11s %12.3g %9.2g  %s\n", mark, r.algorithm.c_str(),
                  r.median_ms, r.gflops(), bytes_text(double(r.workspace_bytes)).c_str(), r.max_abs_err, r.rel_err,
                  note.c_str());
    os << line;
  }
  if (declined) os << "   (" << declined << " declined, listed after the layer's last table)\n";
  os.flush();
}

/// "cpu.fft: reason" once per algorithm and reason, with the directions when not all.
std::vector<std::string> declined_lines(const std::vector<Record>& layer_records, std::size_t directions) {
  std::vector<std::pair<std::string, std::vector<std::string>>> seen;  // "algo: reason" -> directions
  for (const Record& r : layer_records) {
    if (r.status != "skipped") continue;
    const std::string key = r.algorithm + ": " + r.reason;
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& e) { return e.first == key; });
    if (it == seen.end()) it = seen.emplace(seen.end(), key, std::vector<std::string>{});
    it->second.push_back(r.direction);
  }
  std::vector<std::string> out;
  for (const auto& [key, dirs] : seen) {
    std::string line = key;
    if (dirs.size() < directions) {
      line += " (";
      for (std::size_t i = 0; i < dirs.size(); ++i) line += (i ? ", " : "") + dirs[i];
      line += ")";
    }
    out.push_back(line);
  }
  return out;
}

/// A candidate's record before anything runs: its layer, problem, estimate and verdicts.
Record candidate_record(const std::string& layer, const ConvProblem& p, const Candidate& c) {
  Record r;
  r.layer = layer;
  r.direction = std::string(direction_name(p.direction));
  r.algorithm = c.algorithm->name();
  r.eligible = c.eligible;
  r.default_choice = c.default_choice;
  r.estimated_ms = c.estimated_ms;
  r.reason = c.reason;
  r.workspace_bytes = c.workspace;
  r.flops = p.flops();
  r.operand_bytes = 4.0 * double(p.x_numel() + p.w_numel() + p.y_numel());
  r.problem = p.key();
  return r;
}

Record make_record(const Workload& wl, const ErrorCheck& check, const Candidate& c) {
  Record r = candidate_record(wl.layer.name, wl.problem, c);
  r.check = check.description;
  r.check_fraction = check.fraction;
  return r;
}

/// --estimates-only: the candidates' estimates and fast_run's pick, as records of status
/// "estimated" (no operands, no reference check, nothing run).
void estimate_one(const Layer& layer, ConvDirection dir, const Mode& mode, bool all_algos, Report& rep) {
  const ConvProblem p = make_problem(layer, dir, mode);
  std::cout << "\n== " << layer.name << "  " << direction_name(dir) << "  " << layer.describe() << "  "
            << fmt("%.3f", p.flops() * 1e-9) << " GFLOP\n   algorithm          estimated ms  note\n";
  for (const Candidate& c : list_candidates(layer, p, mode, all_algos)) {
    Record r = candidate_record(layer.name, p, c);
    r.status = c.timed ? "estimated" : "skipped";
    char line[256];
    std::snprintf(line, sizeof line, "   %-18s %12.3f  %s\n", r.algorithm.c_str(), r.estimated_ms,
                  r.default_choice ? "fast_run default" : r.reason.c_str());
    if (c.timed) std::cout << line;
    rep.records.push_back(std::move(r));
  }
}

void bench_one(const Layer& layer, ConvDirection dir, const Options& o, const Mode& mode, bool all_algos,
               ThreadPool* pool, Progress& progress, std::size_t step, Report& rep) {
  if (o.estimates_only) return estimate_one(layer, dir, mode, all_algos, rep);
  const std::string label = msg(layer.name, " ", direction_name(dir));
  Workload wl = make_workload(layer, dir, mode, o.seed);
  progress.show(step, label + ": reference check");
  const ErrorCheck check = make_error_check(wl, o.check_flops);

  std::vector<Record> rows;
  double best = 0;
  int best_row = -1;
  // fast_run's default goes first: it is always timed in full (early stopping measures
  // the others against it), so the default can be compared with the fastest.
  std::vector<Candidate> candidates = list_candidates(layer, wl.problem, mode, all_algos);
  std::stable_partition(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.default_choice; });
  for (const Candidate& c : candidates) {
    Record r = make_record(wl, check, c);
    if (!c.timed) {
      r.status = "skipped";
      rows.push_back(std::move(r));
      continue;
    }
    progress.show(step, label + ": " + r.algorithm);
    try {
      const Timing t = time_algorithm(wl, *c.algorithm, c.workspace, pool, o.repeats, o.early_stop, best);
      const CheckResult chk = check_output(wl, check);
      r.status = !chk.ok ? "wrong" : t.early_stopped ? "early_stopped" : "timed";
      if (!chk.ok) r.reason = chk.detail;
      r.error_ok = chk.ok;
      r.max_abs_err = chk.max_abs_err;
      r.rel_err = chk.rel_err;
      r.median_ms = t.stats.median * 1e3;
      r.min_ms = t.stats.min * 1e3;
      r.max_ms = t.stats.max * 1e3;
      for (double s : t.samples) r.samples_ms.push_back(s * 1e3);
    } catch (const std::exception& e) {
      r.status = "failed";
      r.reason = e.what();
    }
    if (r.status == "wrong" || r.status == "failed") ++rep.failures;
    if (r.status == "timed" && c.eligible && (best_row < 0 || r.median_ms < best * 1e3)) {
      best = r.median_ms * 1e-3;
      best_row = static_cast<int>(rows.size());
    }
    rows.push_back(std::move(r));
  }
  if (best_row >= 0) {
    Record& chosen = rows[static_cast<std::size_t>(best_row)];
    chosen.chosen = true;
    ++rep.wins[chosen.algorithm];
    for (const Record& r : rows)
      if (r.default_choice && r.status == "timed") {
        rep.chosen_ms[chosen.direction].push_back(chosen.median_ms);
        rep.default_ms[chosen.direction].push_back(r.median_ms);
      }
  }
  progress.clear();
  print_table(wl, check, rows, std::cout);
  if (best_row < 0) std::cout << "   (no candidate could be timed: nothing chosen)\n";
  rep.records.insert(rep.records.end(), rows.begin(), rows.end());
}

/// printf into a string (a table row).
template <class... Args>
std::string row(const char* format, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

/// The header of every JSON file: the run and the machine it ran on.
Json run_json(const char* tool, const MachineInfo& machine, int threads, const std::string& flags) {
  Json j{{"tool", tool}};
  const Json m = to_json(machine);
  for (const auto& [key, value] : m.items()) j[key] = value;
  j["commit"] = git_commit();
  j["threads"] = threads;
  j["flags"] = flags;
  return j;
}

/// --networks: every (network, mode) in its own child process, then a table and JSON.
int run_networks(const Options& o) {
  NetworkOptions no;
  try {
    no.mode = Mode::from_flags(o.flags);
  } catch (const Error& e) {
    throw UsageError(msg("--flags: ", e.what()));
  }
  const std::vector<std::string> known = network_names();
  for (const auto& n : o.networks)
    if (std::find(known.begin(), known.end(), n) == known.end())
      throw UsageError(msg("--networks: unknown network '", n, "' (known: lenet, resnet8, c3d_small)"));
  if (!o.json.empty()) write_text_file(o.json, "");
  no.threads = o.threads > 0 ? o.threads : 2;
  no.repeats = o.repeats;
  no.seed = o.seed;
  const MachineInfo machine = machine_info();
  std::cout << "convgraph-bench --networks: threads=" << no.threads << ", median of " << no.repeats
            << " steps after " << no.warmup << " warm-ups, flags=\"" << o.flags << "\""
            << fmt(", load average %.2f", machine.load_average[0]) << "\ncpu kernels: " << machine.isa << "\n"
            << row("%-10s %-6s %10s %10s %12s %11s %11s %6s %9s\n", "network", "mode", "ms", "min ms", "images/s",
                   "peak MiB", "arena MiB", "fused", "compile s");
  Json records = Json::array();
  for (const auto& n : o.networks)
    for (bool train : {true, false}) {
      const NetworkRecord r = time_network(n, train, no);
      std::cout << row("%-10s %-6s %10.2f %10.2f %12.1f %11.1f %11.1f %6zu %9.2f\n", r.network.c_str(), r.mode.c_str(),
                       r.ms, r.min_ms, r.images_per_s, static_cast<double>(r.peak_bytes) / 1048576.0,
                       static_cast<double>(r.arena_bytes) / 1048576.0, r.fused_convs, r.compile_s)
                << std::flush;
      records.push_back(Json{{"network", r.network},
                             {"framework", "convgraph"},
                             {"mode", r.mode},
                             {"ms", r.ms},
                             {"min_ms", r.min_ms},
                             {"images_per_s", r.images_per_s},
                             {"peak_bytes", r.peak_bytes},
                             {"arena_bytes", r.arena_bytes},
                             {"threads", no.threads},
                             {"compile_s", r.compile_s},
                             {"fused_convs", r.fused_convs}});
    }
  if (!o.json.empty()) {
    Json j = run_json("convgraph-bench --networks", machine, no.threads, o.flags);
    j["records"] = std::move(records);
    write_json_file(o.json, j);
    std::cerr << "[bench] wrote " << o.json << "\n";
  }
  return 0;
}

/// Creates the output files now: a bad path fails before the run, not after it.
void check_writable(const Options& o) {
  if (!o.json.empty()) write_text_file(o.json, "");
  if (!o.csv.empty()) write_text_file(o.csv, "");
  if (!o.report.empty()) {
    try {
      std::filesystem::create_directories(o.report);
    } catch (const std::filesystem::filesystem_error& e) {
      throw UsageError(msg("--report: cannot create '", o.report, "': ", e.code().message()));
    }
    write_text_file((std::filesystem::path(o.report) / "index.html").string(), "");
  }
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{kDescription, "convgraph-bench"};
  app.footer(kFooter);
  setup_cli(app, msg("(commit ", git_commit(), ")"));
  add_options(app, o);
  if (const int status = parse_cli(app, argc, argv); status >= 0) return status;
  if (!o.layers_file.empty() && o.suite != "standard") throw UsageError("--layers and --suite quick are exclusive");
  if (!o.networks.empty()) return run_networks(o);
  const std::vector<Layer> layers = select_layers(o);
  Mode mode;
  try {
    mode = Mode::from_flags(o.flags);
  } catch (const Error& e) {
    throw UsageError(msg("--flags: ", e.what()));
  }
  if (mode.device != DeviceKind::cpu && !cuda_info().available)
    throw UsageError(msg("--flags: device=", device_name(mode.device), " needs a GPU: ", cuda_info().reason));
  std::vector<double> step_work;  // every problem is valid before any work starts
  for (const Layer& l : layers)
    for (ConvDirection d : o.directions) step_work.push_back(make_problem(l, d, mode).flops());
  const Anchors anchors = o.anchors.empty() ? Anchors{} : read_anchors(o.anchors);
  check_writable(o);
  const int threads = o.threads > 0 ? o.threads : mode.threads;
  if (threads > 0) setenv("CONVGRAPH_THREADS", std::to_string(threads).c_str(), 1);
  ThreadPool& pool = ThreadPool::default_pool();  // the reference uses it too
  const bool all_algos = o.all_algorithms >= 0 ? o.all_algorithms == 1 : o.suite == "quick";
  const MachineInfo machine = machine_info();

  std::cout << "convgraph-bench: " << layers.size() << " layers x " << o.directions.size()
            << " directions, fp32, threads=" << pool.size() << ", repeats=" << o.repeats
            << " (median after 1 warm-up), flags=\"" << o.flags << "\""
            << (all_algos ? ", all algorithms timed (* = fastest meta candidate)" : "")
            << fmt(", load average %.2f", machine.load_average[0]) << "\n"
            << "cpu kernels: " << machine.isa << " (this CPU supports " << machine.isa_detected
            << "; CONVGRAPH_CPU_ISA lowers it)\n";
  Report rep;
  const double t_start = now_seconds();
  {
    Progress progress(step_work);
    std::size_t step = 0;
    for (const Layer& l : layers) {
      const std::size_t first = rep.records.size();
      for (ConvDirection d : o.directions) {
        bench_one(l, d, o, mode, all_algos, &pool, progress, step, rep);
        progress.finish_step(step++);
      }
      const std::vector<Record> mine(rep.records.begin() + static_cast<std::ptrdiff_t>(first), rep.records.end());
      rep.declined.emplace_back(l.name, declined_lines(mine, o.directions.size()));
      if (!rep.declined.back().second.empty()) {
        std::cout << "\n   declined on " << l.name << " (not timed; every direction unless noted):\n";
        for (const auto& line : rep.declined.back().second) std::cout << "     " << line << "\n";
      }
    }
  }

  if (o.estimates_only)
    std::cout << "\n== estimates only: nothing was timed\n";
  else
    std::cout << "\n== summary: geometric mean of the median ms of the chosen (fastest) algorithm and of\n"
               "   fast_run's default (the cost model's pick, no tuning), over the layers where both were timed\n";
  Json summary = Json::array();
  std::vector<double> all_chosen, all_default;
  for (ConvDirection d : o.directions) {
    const auto& v = rep.chosen_ms[std::string(direction_name(d))];
    const auto& u = rep.default_ms[std::string(direction_name(d))];
    all_chosen.insert(all_chosen.end(), v.begin(), v.end());
    all_default.insert(all_default.end(), u.begin(), u.end());
    char name[32];
    std::snprintf(name, sizeof name, "%-11s", std::string(direction_name(d)).c_str());
    if (!o.estimates_only)
      std::cout << "   " << name
              << (v.empty() ? std::string("         - ms") : fmt("%10.3f ms chosen, %10.3f ms default (x%.3f)",
                                                             geometric_mean(v), geometric_mean(u),
                                                             geometric_mean(u) / geometric_mean(v)))
              << "  over " << v.size() << " layers\n";
    summary.push_back(Json{{"direction", direction_name(d)},
                           {"geomean_chosen_ms", geometric_mean(v)},
                           {"geomean_default_ms", geometric_mean(u)},
                           {"layers", v.size()}});
  }
  if (!all_chosen.empty())
    std::cout << fmt("   default / chosen geomean, all directions: %.3f\n",
                     geometric_mean(all_default) / geometric_mean(all_chosen));
  if (!o.estimates_only) {
    std::cout << "   chosen:";
    for (const auto& [name, n] : rep.wins) std::cout << " " << name << " x" << n;
  }
  std::cout << fmt("\n   total %.1f s", now_seconds() - t_start)
            << (rep.failures ? msg(", ", rep.failures, " candidate run(s) FAILED or WRONG") : std::string()) << "\n"
            << std::flush;

  const MachineInfo machine_end = machine_info();
  if (!o.json.empty()) {
    Json j = run_json("convgraph-bench", machine, static_cast<int>(pool.size()), o.flags);
    j["load_average_end"] = to_json(machine_end)["load_average"];
    j["repeats"] = o.repeats;
    j["mode"] = mode.to_string();
    j["records"] = Json::array();
    for (const Record& r : rep.records) j["records"].push_back(to_json(r));
    j["summary"] = std::move(summary);
    write_json_file(o.json, j);
    std::cerr << "[bench] wrote " << o.json << "\n";
  }
  if (!o.csv.empty()) {
    write_text_file(o.csv, records_csv(rep.records));
    std::cerr << "[bench] wrote " << o.csv << "\n";
  }
  if (!o.report.empty()) {
    ReportInput in;
    in.machine = machine;
    in.commit = git_commit();
    in.flags = o.flags;
    in.mode = mode.to_string();
    in.threads = static_cast<int>(pool.size());
    in.repeats = o.repeats;
    std::cerr << "[bench] measuring the FP32 peak and the memory bandwidth for the roofline...\n";
    const PeakResult peak = measure_peak(in.threads);
    in.peak_gflops = peak.gflops;
    in.peak_isa = peak.isa;
    in.bandwidth_gbs = measure_bandwidth(in.threads);
    in.records = rep.records;
    in.declined = rep.declined;
    in.anchors = anchors;
    in.anchors_source = o.anchors;
    write_report(o.report, in);
    std::cerr << "[bench] wrote " << (std::filesystem::path(o.report) / "index.html").string() << "\n";
  }
  return rep.failures ? 1 : 0;
}

}  // namespace
}  // namespace convgraph::bench

int main(int argc, char** argv) {
  using namespace convgraph::bench;
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "convgraph-bench: error: " << e.what() << "\n";
    return 2;
  } catch (const convgraph::FlagError& e) {
    std::cerr << "convgraph-bench: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "convgraph-bench: fatal: " << e.what() << "\n";
    return 1;
  }
}
