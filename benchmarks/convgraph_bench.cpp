// convgraph-bench, the main job: for each layer and direction, time every candidate the
// meta-optimizer would time, check each result against the reference, and report the
// fastest. Tables go to stdout, progress to stderr, records to --json.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <sstream>

#include "benchmarks/bench_common.hpp"
#include "benchmarks/bench_networks.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph::bench {
namespace {

constexpr const char* kUsage = R"(usage: convgraph-bench [options]

Times every convolution algorithm the meta-optimizer would consider, for each layer and
direction, checks each result against the float64-accumulating reference, and marks the
fastest correct one (the meta-optimizer's choice). fp32, NCHW, cross-correlation.

  --suite standard|quick   built-in layer set (default standard: the 13 layers of
                           benchmarks/layers.txt; quick: small layers, < 1 min)
  --layers FILE            layers from FILE: name N C K spatial kernel stride pad dilation
                           groups ('x'-separated axes, '#' comments)
  --only NAME[,NAME...]    run only these layers of the set
  --directions LIST        fwd,bwd_data,bwd_filter (default: all three)
  --flags "FLAGS"          the flag language, e.g. "optimizer_excluding=conv_gemm",
                           "metaopt.optimizer_including=conv_fft", "workspace_limit=64M"
  --all-algorithms         also time algorithms that are not meta candidates (never
                           chosen); default for --suite quick
  --meta-only              time only meta candidates (default for the standard set)
  --threads N              threads for algorithms and reference (default: CONVGRAPH_THREADS
                           or all hardware threads)
  --repeats N              timed runs after one warm-up; the median is reported (default 5)
  --early-stop F           time only the warm-up of a candidate F times slower than the best
                           so far, as the meta-optimizer does (default 10; 0: time all fully)
  --check-flops F          cost cap of the reference check: larger problems are checked on a
                           batch/channel subset (default 2e8; 0: check everything)
  --seed N                 random data seed (default 1)
  --json FILE              write one record per (layer, direction, algorithm)
  --networks LIST          time whole networks instead of layers: lenet,resnet8,c3d_small
                           (benchmarks/NETWORKS.md): a training step (forward, backward,
                           SGD, batch-norm running averages) and inference, each in a
                           fresh process; ms (median of --repeats after 2 warm-ups),
                           images/s, peak resident-set growth, and the planner's arena
  --help                   this text

Exit status: 0 ok, 1 a candidate failed (wrong result or exception), 2 bad usage.
)";

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
  std::uint64_t seed = 1;
  std::string json;
  std::vector<std::string> networks;  ///< --networks: whole networks instead of layers
  bool help = false;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const bool has_eq = arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos;
    if (has_eq) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
    }
    auto next = [&]() -> std::string {
      if (has_eq) return value;
      if (i + 1 >= argc) throw UsageError(msg(arg, " needs a value (see --help)"));
      return argv[++i];
    };
    auto no_value = [&] {
      if (has_eq) throw UsageError(msg(arg, " takes no value"));
    };
    if (arg == "--help" || arg == "-h") { no_value(); o.help = true; }
    else if (arg == "--suite") {
      o.suite = next();
      if (o.suite != "standard" && o.suite != "quick")
        throw UsageError(msg("--suite: unknown suite '", o.suite, "' (valid: standard, quick)"));
    } else if (arg == "--layers") o.layers_file = next();
    else if (arg == "--only") o.only = split_list(next());
    else if (arg == "--directions") o.directions = parse_directions(next());
    else if (arg == "--flags") o.flags = next();
    else if (arg == "--all-algorithms") { no_value(); o.all_algorithms = 1; }
    else if (arg == "--meta-only") { no_value(); o.all_algorithms = 0; }
    else if (arg == "--threads") o.threads = static_cast<int>(parse_int(next(), "--threads", 1, 1024));
    else if (arg == "--repeats") o.repeats = static_cast<int>(parse_int(next(), "--repeats", 1, 100000));
    else if (arg == "--early-stop") o.early_stop = parse_double(next(), "--early-stop", 0, 1e9);
    else if (arg == "--check-flops") o.check_flops = parse_double(next(), "--check-flops", 0, 1e18);
    else if (arg == "--seed") o.seed = static_cast<std::uint64_t>(parse_int(next(), "--seed", 0, INT64_MAX));
    else if (arg == "--json") o.json = next();
    else if (arg == "--networks") o.networks = split_list(next());
    else throw UsageError(msg("unknown option '", argv[i], "' (see --help)"));
  }
  if (!o.layers_file.empty() && o.suite != "standard")
    throw UsageError("--layers and --suite quick are exclusive");
  return o;
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

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// One row of a table: one algorithm on one (layer, direction).
struct Row {
  Candidate cand;
  std::string status;  ///< "timed", "early_stopped", "skipped", "failed", "wrong"
  Timing timing;
  CheckResult check;
  bool chosen = false;
};

struct Report {
  std::vector<std::string> json_records;
  std::map<std::string, std::vector<double>> chosen_ms;  ///< direction -> chosen times
  std::map<std::string, int> wins;                        ///< algorithm -> times chosen
  int failures = 0;
};

void print_table(const Workload& wl, const ErrorCheck& check, const std::vector<Row>& rows, std::ostream& os) {
  const ConvProblem& p = wl.problem;
  os << "\n== " << wl.layer.name << "  " << direction_name(p.direction) << "  " << wl.layer.describe() << "  "
     << fmt("%.3f", p.flops() * 1e-9) << " GFLOP\n"
     << "   error check: reference (float64 accumulation) on " << check.description << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "   %-18s %10s %9s %11s %12s %9s  %s\n", "algorithm", "median ms", "GFLOP/s",
                "workspace", "max abs err", "rel err", "note");
  os << line;
  for (const Row& r : rows) {
    const char* mark = r.chosen ? " * " : "   ";
    if (r.status == "skipped") {
      std::snprintf(line, sizeof line, "%s%-18s %10s %9s %11s %12s %9s  %s\n", mark, r.cand.algorithm->name().c_str(),
                    "-", "-", "-", "-", "-", ("declined: " + r.cand.reason).c_str());
      os << line;
      continue;
    }
    if (r.status == "failed") {
      os << mark << r.cand.algorithm->name() << "  FAILED: " << r.cand.reason << "\n";
      continue;
    }
    std::string note = r.chosen ? "chosen" : "";
    if (r.status == "wrong") note = "WRONG: " + r.check.detail;
    if (r.status == "early_stopped") note = "warm-up only (early stop)";
    if (!r.cand.eligible) note += (note.empty() ? "" : "; ") + r.cand.reason;
    const double ms = r.timing.stats.median * 1e3;
    std::snprintf(line, sizeof line, "%s%-18s %10.3f %9.1f %11s %12.3g %9.2g  %s\n", mark,
                  r.cand.algorithm->name().c_str(), ms, p.flops() / r.timing.stats.median * 1e-9,
                  bytes_text(double(r.cand.workspace)).c_str(), r.check.max_abs_err, r.check.rel_err, note.c_str());
    os << line;
  }
  os.flush();
}

void add_json(const Workload& wl, const ErrorCheck& check, const std::vector<Row>& rows, Report& rep) {
  const ConvProblem& p = wl.problem;
  for (const Row& r : rows) {
    const bool ran = r.status != "skipped" && r.status != "failed";
    JsonObject j;
    j.add_str("layer", wl.layer.name).add_str("direction", direction_name(p.direction));
    j.add_str("algorithm", r.cand.algorithm->name());
    j.add_num("median_ms", ran ? r.timing.stats.median * 1e3 : NAN);
    j.add_num("min_ms", ran ? r.timing.stats.min * 1e3 : NAN);
    j.add_int("runs", ran ? r.timing.stats.runs : 0);
    j.add_num("gflops", ran ? p.flops() / r.timing.stats.median * 1e-9 : NAN);
    j.add_int("workspace_bytes", static_cast<std::int64_t>(r.cand.workspace));
    j.add_num("max_abs_err", ran ? r.check.max_abs_err : NAN);
    j.add_num("rel_err", ran ? r.check.rel_err : NAN);
    j.add_bool("error_ok", ran && r.check.ok);
    j.add_bool("chosen", r.chosen).add_bool("eligible", r.cand.eligible);
    j.add_str("status", r.status).add_str("reason", r.status == "wrong" ? r.check.detail : r.cand.reason);
    j.add_num("flops", p.flops()).add_str("problem", p.key());
    j.add_str("check", check.description).add_num("check_fraction", check.fraction);
    rep.json_records.push_back(j.str(4));
  }
}

void bench_one(const Layer& layer, ConvDirection dir, const Options& o, const Mode& mode, bool all_algos,
               ThreadPool* pool, Report& rep) {
  const std::string label = msg(layer.name, " ", direction_name(dir));
  Workload wl = make_workload(layer, dir, mode, o.seed);
  std::cerr << "[bench] " << label << ": reference check..." << std::flush;
  const double t0 = now_seconds();
  const ErrorCheck check = make_error_check(wl, o.check_flops);
  std::cerr << fmt(" %.2f s\n", now_seconds() - t0);

  std::vector<Row> rows;
  double best = 0;
  int best_row = -1;
  for (const Candidate& c : list_candidates(layer, wl.problem, mode, all_algos)) {
    Row r;
    r.cand = c;
    if (!c.timed) {
      r.status = "skipped";
      rows.push_back(std::move(r));
      continue;
    }
    std::cerr << "[bench] " << label << ": " << c.algorithm->name() << "..." << std::flush;
    try {
      r.timing = time_algorithm(wl, *c.algorithm, c.workspace, pool, o.repeats, o.early_stop, best);
      r.check = check_output(wl, check);
      r.status = !r.check.ok ? "wrong" : r.timing.early_stopped ? "early_stopped" : "timed";
      std::cerr << fmt(" %.3f ms", r.timing.stats.median * 1e3) << (r.check.ok ? "\n" : " WRONG\n");
    } catch (const std::exception& e) {
      r.status = "failed";
      r.cand.reason = e.what();
      std::cerr << " failed: " << e.what() << "\n";
    }
    if (r.status == "wrong" || r.status == "failed") ++rep.failures;
    if (r.status == "timed" && c.eligible && (best_row < 0 || r.timing.stats.median < best)) {
      best = r.timing.stats.median;
      best_row = static_cast<int>(rows.size());
    }
    rows.push_back(std::move(r));
  }
  if (best_row >= 0) {
    rows[static_cast<std::size_t>(best_row)].chosen = true;
    rep.chosen_ms[std::string(direction_name(dir))].push_back(best * 1e3);
    ++rep.wins[rows[static_cast<std::size_t>(best_row)].cand.algorithm->name()];
  }
  print_table(wl, check, rows, std::cout);
  if (best_row < 0) std::cout << "   (no candidate could be timed: nothing chosen)\n";
  add_json(wl, check, rows, rep);
}

std::string iso_date() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

/// printf into a string (a table row).
template <class... Args>
std::string row(const char* format, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
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
  std::cout << "convgraph-bench --networks: threads=" << no.threads << ", median of " << no.repeats
            << " steps after " << no.warmup << " warm-ups, flags=\"" << o.flags << "\""
            << fmt(", load average %.2f", load_average()) << "\ncpu kernels: " << cpu_isa_name(active_cpu_isa()) << "\n"
            << row("%-10s %-6s %10s %10s %12s %11s %11s %6s %9s\n", "network", "mode", "ms", "min ms", "images/s",
                   "peak MiB", "arena MiB", "fused", "compile s");
  std::vector<std::string> records;
  for (const auto& n : o.networks)
    for (bool train : {true, false}) {
      const NetworkRecord r = time_network(n, train, no);
      std::cout << row("%-10s %-6s %10.2f %10.2f %12.1f %11.1f %11.1f %6zu %9.2f\n", r.network.c_str(), r.mode.c_str(),
                       r.ms, r.min_ms, r.images_per_s, static_cast<double>(r.peak_bytes) / 1048576.0,
                       static_cast<double>(r.arena_bytes) / 1048576.0, r.fused_convs, r.compile_s)
                << std::flush;
      records.push_back(JsonObject()
                            .add_str("network", r.network)
                            .add_str("framework", "convgraph")
                            .add_str("mode", r.mode)
                            .add_num("ms", r.ms)
                            .add_num("min_ms", r.min_ms)
                            .add_num("images_per_s", r.images_per_s)
                            .add_int("peak_bytes", static_cast<std::int64_t>(r.peak_bytes))
                            .add_int("arena_bytes", static_cast<std::int64_t>(r.arena_bytes))
                            .add_int("threads", no.threads)
                            .add_num("compile_s", r.compile_s)
                            .add_int("fused_convs", static_cast<std::int64_t>(r.fused_convs))
                            .str(4));
    }
  if (!o.json.empty()) {
    std::string text = "{\n  \"tool\": \"convgraph-bench --networks\",\n  \"date\": " + json_string(iso_date()) +
                       ",\n  \"threads\": " + std::to_string(no.threads) + ",\n  \"flags\": " + json_string(o.flags) +
                       ",\n  \"records\": [\n";
    for (std::size_t i = 0; i < records.size(); ++i) text += records[i] + (i + 1 < records.size() ? ",\n" : "\n");
    text += "  ]\n}\n";
    write_text_file(o.json, text);
    std::cerr << "[bench] wrote " << o.json << "\n";
  }
  return 0;
}

int run(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  if (o.help) {
    std::cout << kUsage;
    return 0;
  }
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
  for (const Layer& l : layers)  // every problem is valid before any work starts
    for (ConvDirection d : o.directions) (void)make_problem(l, d, mode);
  if (!o.json.empty()) write_text_file(o.json, "");  // fail now, not after the whole run
  const int threads = o.threads > 0 ? o.threads : mode.threads;
  if (threads > 0) setenv("CONVGRAPH_THREADS", std::to_string(threads).c_str(), 1);
  ThreadPool& pool = ThreadPool::default_pool();  // the reference uses it too
  const bool all_algos = o.all_algorithms >= 0 ? o.all_algorithms == 1 : o.suite == "quick";

  std::cout << "convgraph-bench: " << layers.size() << " layers x " << o.directions.size()
            << " directions, fp32, threads=" << pool.size() << ", repeats=" << o.repeats
            << " (median after 1 warm-up), flags=\"" << o.flags << "\""
            << (all_algos ? ", all algorithms timed (* = fastest meta candidate)" : "")
            << fmt(", load average %.2f", load_average()) << "\n"
            << "cpu kernels: " << cpu_isa_name(active_cpu_isa()) << " (this CPU supports "
            << cpu_isa_name(detected_cpu_isa()) << "; CONVGRAPH_CPU_ISA lowers it)\n";
  Report rep;
  const double t_start = now_seconds();
  for (const Layer& l : layers)
    for (ConvDirection d : o.directions) bench_one(l, d, o, mode, all_algos, &pool, rep);

  std::cout << "\n== summary: geometric mean of the chosen algorithm's median ms\n";
  std::vector<std::string> summary;
  for (ConvDirection d : o.directions) {
    const auto& v = rep.chosen_ms[std::string(direction_name(d))];
    char name[32];
    std::snprintf(name, sizeof name, "%-11s", std::string(direction_name(d)).c_str());
    std::cout << "   " << name << (v.empty() ? std::string("         - ms") : fmt("%10.3f ms", geometric_mean(v)))
              << "  over " << v.size() << " layers\n";
    summary.push_back(JsonObject()
                          .add_str("direction", direction_name(d))
                          .add_num("geomean_chosen_ms", geometric_mean(v))
                          .add_int("layers", static_cast<std::int64_t>(v.size()))
                          .str(4));
  }
  std::cout << "   chosen:";
  for (const auto& [name, n] : rep.wins) std::cout << " " << name << " x" << n;
  std::cout << fmt("\n   total %.1f s", now_seconds() - t_start)
            << (rep.failures ? msg(", ", rep.failures, " candidate run(s) FAILED or WRONG") : std::string()) << "\n";

  if (!o.json.empty()) {
    std::string text = "{\n  \"tool\": \"convgraph-bench\",\n  \"date\": " + json_string(iso_date()) +
                       ",\n  \"threads\": " + std::to_string(pool.size()) +
                       ",\n  \"repeats\": " + std::to_string(o.repeats) + ",\n  \"flags\": " + json_string(o.flags) +
                       ",\n  \"mode\": " + json_string(mode.to_string()) + ",\n  \"records\": [\n";
    for (std::size_t i = 0; i < rep.json_records.size(); ++i)
      text += rep.json_records[i] + (i + 1 < rep.json_records.size() ? ",\n" : "\n");
    text += "  ],\n  \"summary\": [\n";
    for (std::size_t i = 0; i < summary.size(); ++i) text += summary[i] + (i + 1 < summary.size() ? ",\n" : "\n");
    text += "  ]\n}\n";
    write_text_file(o.json, text);
    std::cerr << "[bench] wrote " << o.json << "\n";
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
