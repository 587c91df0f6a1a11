// convgraph-anchors: convgraph's chosen algorithm against oneDNN (convolution_auto, fp32,
// NCHW user memory in and out), on the same data, interleaved in one process. oneDNN is
// timed twice: with the reorders to and from its preferred layout counted (what a user
// holding NCHW tensors pays), and the convolution primitive alone. Benchmark-only code.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>
#include <unistd.h>
#include <unordered_map>

#if CONVGRAPH_ANCHORS_OPENMP
#include <omp.h>
#endif

#include "benchmarks/bench_anchors_dnnl.hpp"
#include "benchmarks/bench_cli.hpp"
#include "benchmarks/bench_common.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/optimizer/conv_impl_op.hpp"
#include "convgraph/optimizer/meta_optimizer.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph::bench {
namespace {

constexpr const char* kDescription = R"(convgraph-anchors: times convgraph's chosen convolution algorithm (the fastest meta
candidate whose result matches oneDNN's) against oneDNN convolution_auto on the same
layers, interleaved in one process: fp32, NCHW in and out, forward / grad inputs / grad
weights. Prints per layer the median ms of each, the ratio convgraph/oneDNN, geometric
means per direction and the fraction of this machine's FP32 peak (measured with an FMA
loop at start and end).)";

struct Options {
  std::string suite = "standard", layers_file, flags, json;
  std::vector<std::string> only;
  std::vector<ConvDirection> directions{ConvDirection::forward, ConvDirection::grad_inputs,
                                        ConvDirection::grad_weights};
  int threads = 2, repeats = 5, select_repeats = 3;
  double gap_ms = 2;
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("--suite", o.suite, "layer set, as convgraph-bench: standard or quick")
      ->check(CLI::IsMember({"standard", "quick"}))
      ->capture_default_str();
  app.add_option("--layers", o.layers_file, "layers from FILE (convgraph-bench's format)")->type_name("FILE");
  app.add_option("--only", o.only, "run only these layers of the set")->delimiter(',')->type_name("NAME[,NAME...]");
  app.add_option_function<std::string>(
         "--directions", [&o](const std::string& v) { o.directions = parse_directions(v); },
         "fwd,bwd_data,bwd_filter (default all)")
      ->type_name("LIST");
  app.add_option("--flags", o.flags, "convgraph's flag language (selects the candidates)");
  app.add_option("--threads", o.threads, "threads for both libraries")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--repeats", o.repeats, "interleaved timed runs per implementation")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--select-repeats", o.select_repeats,
                 "timed runs per candidate while choosing (the meta-optimizer's minimum is 3)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--gap-ms", o.gap_ms,
                 "pause before each timed run, so the other library's idle threads settle")
      ->check(CLI::Range(0.0, 1000.0))
      ->type_name("MS")
      ->capture_default_str();
  app.add_option("--json", o.json, "write the records")->type_name("FILE");
}

// ---- one (layer, direction) ------------------------------------------------------------

struct Result {
  std::string layer, direction, algorithm, dnnl_impl, note;
  Json candidates = Json::array();
  double cg_ms = 0, dnnl_ms = 0, dnnl_conv_ms = 0, flops = 0, err = 0;
  bool ok = true;
};

void settle(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

Result bench_one(const Layer& layer, ConvDirection dir, const Options& o, const Mode& mode, ThreadPool* pool) {
  Result r;
  r.layer = layer.name;
  r.direction = std::string(direction_name(dir));
  Workload wl = make_workload(layer, dir, mode, 1);
  r.flops = wl.problem.flops();
  DnnlConv dnnl(wl);
  r.dnnl_impl = dnnl.impl();
  dnnl.run_with_reorders();  // warm-up, and the result every candidate is compared with

  // Choose as the meta-optimizer does: the fastest candidate whose result is right, a
  // close call (confirm_challenger, with TuneOptions' confirm_margin and confirm_rounds)
  // decided by alternating rounds of both through alternating_medians, as tune_conv does.
  double best = 0;  // for the early stop
  struct Timed {
    std::shared_ptr<const ConvAlgorithm> algorithm;
    std::size_t workspace;
    double median, fastest;
  };
  std::vector<Timed> right;  // every candidate timed in full with a right result
  for (const Candidate& c : list_candidates(layer, wl.problem, mode, false)) {
    if (!c.timed) continue;
    std::cerr << "[anchors] " << layer.name << " " << r.direction << ": choosing, " << c.algorithm->name() << "..."
              << std::flush;
    try {
      const Timing t =
          time_algorithm(wl, *c.algorithm, c.workspace, pool, o.select_repeats, TuneOptions{}.early_stop, best);
      const ConvCheck chk = compare_conv_results(wl.output(), dnnl.output(),
                                                 static_cast<std::int64_t>(wl.output_size()), DType::float32);
      std::cerr << " " << t.stats.median * 1e3 << " ms" << (chk.ok ? "" : " (differs from oneDNN)") << "\n";
      r.candidates.push_back(Json{{"algorithm", c.algorithm->name()},
                                  {"median_ms", t.stats.median * 1e3},
                                  {"early_stopped", t.early_stopped},
                                  {"matches_onednn", chk.ok}});
      if (!chk.ok) r.note += msg(c.algorithm->name(), " differs from oneDNN: ", chk.to_string(), "; ");
      if (chk.ok && !t.early_stopped) {
        right.push_back({c.algorithm, c.workspace, t.stats.median, t.stats.min});
        if (right.size() == 1 || t.stats.median < best) best = t.stats.median;
      }
    } catch (const std::exception& e) {
      std::cerr << " failed: " << e.what() << "\n";
      r.note += msg(c.algorithm->name(), " failed: ", e.what(), "; ");
    }
  }
  if (right.empty()) {
    r.ok = false;
    r.algorithm = "(none)";
    return r;
  }
  // The fastest first; ties keep the earlier candidate.
  std::stable_sort(right.begin(), right.end(), [](const Timed& u, const Timed& v) { return u.median < v.median; });
  const TuneOptions tune;  // the meta-optimizer's close-call rule
  std::vector<double> medians, fastest;
  for (const Timed& t : right) medians.push_back(t.median), fastest.push_back(t.fastest);
  if (const int c = confirm_challenger(medians, fastest, tune.confirm_margin); c > 0) {
    std::optional<std::pair<double, double>> again;
    try {
      again = alternating_medians(tune.confirm_rounds, [&](int k) {
        const Timed& t = right[k == 0 ? 0 : static_cast<std::size_t>(c)];
        return time_algorithm(wl, *t.algorithm, t.workspace, pool, o.select_repeats, 0, 0).samples;
      });
    } catch (const std::exception& e) {  // the first timings decide
      r.note += msg("timing the close call again failed: ", e.what(), "; ");
    }
    if (again) {
      const auto [m0, m1] = *again;
      std::cerr << "[anchors] " << layer.name << " " << r.direction
                << ": timed again (a close call, or a run that beat the leader), alternating rounds: "
                << right[0].algorithm->name() << " " << m0 * 1e3 << " ms, " << right[c].algorithm->name() << " "
                << m1 * 1e3 << " ms\n";
      if (m1 < m0) std::swap(right[0], right[static_cast<std::size_t>(c)]);
    }
  }
  const std::shared_ptr<const ConvAlgorithm> chosen = right[0].algorithm;
  const std::size_t chosen_ws = right[0].workspace;
  r.algorithm = chosen->name();

  // Interleaved timing, rotating the order each round so none always runs first.
  std::cerr << "[anchors] " << layer.name << " " << r.direction << ": timing " << r.algorithm
            << " vs oneDNN..." << std::flush;
  Buffer ws = alloc_buffer((chosen_ws + 3) / 4);
  const ConvContext ctx{pool, ws.data, chosen_ws, nullptr};
  std::vector<double> t_cg, t_dnnl, t_conv;
  auto timed = [&](auto&& fn, std::vector<double>& out) {
    settle(o.gap_ms);  // lets the other library's threads go idle (OpenMP spins after a region)
    const double t0 = now_seconds();
    fn();
    out.push_back(now_seconds() - t0);
  };
  auto run_cg = [&] { chosen->run(wl.problem, wl.tensors(), ctx); };
  run_cg();
  for (int rep = 0; rep < o.repeats; ++rep)
    for (int k = 0; k < 3; ++k) switch ((k + rep) % 3) {
        case 0: timed(run_cg, t_cg); break;
        case 1: timed([&] { dnnl.run_with_reorders(); }, t_dnnl); break;
        default: timed([&] { dnnl.run_conv_only(); }, t_conv); break;
      }
  r.cg_ms = summarize(t_cg).median * 1e3;
  r.dnnl_ms = summarize(t_dnnl).median * 1e3;
  r.dnnl_conv_ms = summarize(t_conv).median * 1e3;
  const ConvCheck chk = compare_conv_results(wl.output(), dnnl.output(), static_cast<std::int64_t>(wl.output_size()),
                                             DType::float32);
  r.err = chk.max_error;
  r.ok = chk.ok;
  std::cerr << " done\n";
  return r;
}

std::string pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100 * v);
  return b;
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{kDescription, "convgraph-anchors"};
  setup_cli(app);
  add_options(app, o);
  if (const int status = parse_cli(app, argc, argv); status >= 0) return status;
  std::vector<Layer> layers = !o.layers_file.empty() ? read_layer_file(o.layers_file)
                              : o.suite == "quick"    ? parse_layers(kQuickLayers, "<quick suite>")
                                                      : parse_layers(kStandardLayers, "<standard set>");
  if (!o.only.empty()) {
    std::vector<Layer> keep;
    for (const auto& n : o.only) {
      auto it = std::find_if(layers.begin(), layers.end(), [&](const Layer& l) { return l.name == n; });
      if (it == layers.end()) throw UsageError(msg("--only: no layer named '", n, "'"));
      keep.push_back(*it);
    }
    layers = keep;
  }
  Mode mode;
  try {
    mode = Mode::from_flags(o.flags);
  } catch (const Error& e) {
    throw UsageError(msg("--flags: ", e.what()));
  }
  for (const Layer& l : layers)
    for (ConvDirection d : o.directions) (void)make_problem(l, d, mode);
  if (!o.json.empty()) write_text_file(o.json, "");
  setenv("CONVGRAPH_THREADS", std::to_string(o.threads).c_str(), 1);
#if CONVGRAPH_ANCHORS_OPENMP
  omp_set_num_threads(o.threads);
#endif
  ThreadPool& pool = ThreadPool::default_pool();
  const std::string dnnl_version = dnnl_version_text();

  std::cerr << "[anchors] measuring the FMA peak...\n";
  const PeakResult peak = measure_peak(o.threads);
  std::printf("convgraph-anchors: fp32, NCHW in/out, threads=%d, medians of %d interleaved runs, oneDNN %s "
              "convolution_auto\npeak FP32 (FMA loop, %s): %.1f GFLOP/s on 1 thread, %.1f on %d threads "
              "(%%pk columns use the latter; %d x the 1-thread figure would be %.1f)\n",
              o.threads, o.repeats, dnnl_version.c_str(), peak.isa.c_str(), peak.gflops_1t, peak.gflops, o.threads,
              o.threads, o.threads * peak.gflops_1t);
  const double trip = core_round_trip_ns();
  std::printf("core-to-core round trip %.0f ns at start (50-110 measured on these VMs while the two vCPUs share an "
              "L3; about 350 while they do not, and then both libraries' two-thread timings slow down)\n",
              trip);
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  std::printf("load average %.2f at start; OMP_WAIT_POLICY=%s%s\n", load_average(), wait_policy ? wait_policy : "(unset)",
              load_average() > o.threads + 0.5
                  ? "  WARNING: other processes are running: every timing suffers; compare only the "
                    "ratios of this run, or rerun on an idle machine"
                  : "");
  std::printf("ratio = convgraph ms / oneDNN ms (< 1: convgraph faster); 'reord' counts oneDNN's reorders "
              "from/to NCHW, 'conv' is its primitive alone\n");

  std::vector<Result> all;
  Json geo_json = Json::array();
  int failures = 0;
  for (ConvDirection d : o.directions) {
    std::printf("\n== %s\n%-15s %-13s %9s %9s %9s %7s %7s %7s %7s  %s\n", std::string(direction_name(d)).c_str(),
                "layer", "convgraph", "cg ms", "reord ms", "conv ms", "ratio", "r/conv", "cg%pk", "dn%pk",
                "oneDNN impl");
    std::vector<double> cg, dn, dc;
    for (const Layer& l : layers) {
      Result r = bench_one(l, d, o, mode, &pool);
      if (!r.ok) ++failures;
      if (r.algorithm == "(none)") {
        std::printf("%-15s (no convgraph candidate matched oneDNN: %s)\n", l.name.c_str(), r.note.c_str());
        all.push_back(r);
        continue;
      }
      cg.push_back(r.cg_ms);
      dn.push_back(r.dnnl_ms);
      dc.push_back(r.dnnl_conv_ms);
      std::printf("%-15s %-13s %9.2f %9.2f %9.2f %7.2f %7.2f %7s %7s  %s%s\n", l.name.c_str(), r.algorithm.c_str(),
                  r.cg_ms, r.dnnl_ms, r.dnnl_conv_ms, r.cg_ms / r.dnnl_ms, r.cg_ms / r.dnnl_conv_ms,
                  pct(r.flops / (r.cg_ms * 1e-3) * 1e-9 / peak.gflops).c_str(),
                  pct(r.flops / (r.dnnl_ms * 1e-3) * 1e-9 / peak.gflops).c_str(), r.dnnl_impl.c_str(),
                  r.ok ? "" : "  RESULT DIFFERS");
      std::fflush(stdout);
      all.push_back(r);
    }
    const double gc = geometric_mean(cg), gd = geometric_mean(dn), gdc = geometric_mean(dc);
    std::printf("%-15s %-13s %9.2f %9.2f %9.2f %7.2f %7.2f\n", "geomean", "", gc, gd, gdc, gd > 0 ? gc / gd : 0,
                gdc > 0 ? gc / gdc : 0);
    geo_json.push_back(Json{{"direction", direction_name(d)},
                            {"convgraph_ms", gc},
                            {"onednn_ms", gd},
                            {"onednn_conv_only_ms", gdc},
                            {"ratio", gd > 0 ? gc / gd : NAN},
                            {"ratio_conv_only", gdc > 0 ? gc / gdc : NAN},
                            {"layers", cg.size()}});
  }
  const PeakResult peak_end = measure_peak(o.threads);
  const double trip_end = core_round_trip_ns();
  std::printf("\npeak FP32 at the end: %.1f GFLOP/s (start %.1f), core-to-core round trip %.0f ns (start %.0f), "
              "load average %.2f%s\n",
              peak_end.gflops, peak.gflops, trip_end, trip, load_average(),
              std::abs(peak_end.gflops / peak.gflops - 1) > 0.1 ? "  WARNING: the machine's speed changed; rerun"
                                                                 : "");
  if (!o.json.empty()) {
    Json j{{"tool", "convgraph-anchors"}};
    const Json m = to_json(machine_info());
    for (const auto& [key, value] : m.items()) j[key] = value;
    j["threads"] = o.threads;
    j["repeats"] = o.repeats;
    j["onednn"] = dnnl_version;
    j["flags"] = o.flags;
    j["peak_gflops"] = peak.gflops;
    j["peak_gflops_1t"] = peak.gflops_1t;
    j["peak_isa"] = peak.isa;
    j["peak_gflops_end"] = peak_end.gflops;
    j["core_round_trip_ns"] = std::isnan(trip) ? Json(nullptr) : Json(trip);
    j["core_round_trip_ns_end"] = std::isnan(trip_end) ? Json(nullptr) : Json(trip_end);
    j["load_average_end"] = load_average();
    j["records"] = Json::array();
    for (const Result& r : all) {
      const double gf = r.cg_ms > 0 ? r.flops / (r.cg_ms * 1e-3) * 1e-9 : NAN;
      j["records"].push_back(Json{{"layer", r.layer},
                                  {"direction", r.direction},
                                  {"algorithm", r.algorithm},
                                  {"convgraph_ms", r.cg_ms},
                                  {"onednn_ms", r.dnnl_ms},
                                  {"onednn_conv_only_ms", r.dnnl_conv_ms},
                                  {"ratio", r.cg_ms / r.dnnl_ms},
                                  {"ratio_conv_only", r.cg_ms / r.dnnl_conv_ms},
                                  {"convgraph_gflops", gf},
                                  {"convgraph_fraction_of_peak", gf / peak.gflops},
                                  {"convgraph_fraction_of_nominal_peak", gf / (o.threads * peak.gflops_1t)},
                                  {"onednn_fraction_of_peak", r.flops / (r.dnnl_ms * 1e-3) * 1e-9 / peak.gflops},
                                  {"onednn_impl", r.dnnl_impl},
                                  {"max_abs_err_vs_onednn", r.err},
                                  {"matches_onednn", r.ok},
                                  {"note", r.note},
                                  {"candidates", r.candidates}});
    }
    j["geomean"] = std::move(geo_json);
    write_json_file(o.json, j);
  }
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace convgraph::bench

int main(int argc, char** argv) {
  // OpenMP reads OMP_WAIT_POLICY when libgomp loads, before main: set it and start again.
  // Spinning OpenMP barriers collapse on these VMs (a vCPU spinning on PAUSE gets descheduled
  // by the hypervisor: oneDNN then takes 10-100x longer on small layers), so oneDNN's best
  // configuration here is passive. Set OMP_WAIT_POLICY yourself to measure another one.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run with the default policy
  }
  try {
    return convgraph::bench::run(argc, argv);
  } catch (const convgraph::bench::UsageError& e) {
    std::cerr << "convgraph-anchors: error: " << e.what() << "\n";
    return 2;
  } catch (const dnnl::error& e) {
    std::cerr << "convgraph-anchors: oneDNN error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "convgraph-anchors: fatal: " << e.what() << "\n";
    return 1;
  }
}
