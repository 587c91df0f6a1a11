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

#include <unistd.h>
#include <unordered_map>

#if CONVGRAPH_ANCHORS_OPENMP
#include <omp.h>
#endif

#include "benchmarks/bench_anchors_dnnl.hpp"
#include "benchmarks/bench_common.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/optimizer/conv_impl_op.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph::bench {
namespace {

constexpr const char* kUsage = R"(usage: convgraph-anchors [options]

Times convgraph's chosen convolution algorithm (the fastest meta candidate whose result
matches oneDNN's) against oneDNN convolution_auto on the same layers, interleaved in one
process: fp32, NCHW in and out, forward / grad inputs / grad weights. Prints per layer the
median ms of each, the ratio convgraph/oneDNN, geometric means per direction and the
fraction of this machine's FP32 peak (measured with an FMA loop at start and end).

  --suite standard|quick  --layers FILE  --only NAME[,NAME]   layer set (as convgraph-bench)
  --directions LIST       fwd,bwd_data,bwd_filter (default all)
  --flags "FLAGS"         convgraph's flag language (selects the candidates)
  --threads N             threads for both libraries (default 2)
  --repeats N             interleaved timed runs per implementation (default 5)
  --select-repeats N      timed runs per candidate while choosing (default 3, as the
                          meta-optimizer's minimum)
  --gap-ms MS             pause before each timed run, so the other library's idle
                          threads settle (default 2)
  --json FILE             write the records
  --help
)";

struct Options {
  std::string suite = "standard", layers_file, flags, json;
  std::vector<std::string> only;
  std::vector<ConvDirection> directions{ConvDirection::forward, ConvDirection::grad_inputs,
                                        ConvDirection::grad_weights};
  int threads = 2, repeats = 5, select_repeats = 3;
  double gap_ms = 2;
  bool help = false;
};

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(msg(arg, " needs a value (see --help)"));
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") o.help = true;
    else if (arg == "--suite") {
      o.suite = next();
      if (o.suite != "standard" && o.suite != "quick")
        throw UsageError(msg("--suite: unknown suite '", o.suite, "' (valid: standard, quick)"));
    } else if (arg == "--layers") o.layers_file = next();
    else if (arg == "--only") {
      std::string s = next(), t;
      for (std::size_t p = 0; p <= s.size(); ++p)
        if (p == s.size() || s[p] == ',') {
          if (!t.empty()) o.only.push_back(t);
          t.clear();
        } else t += s[p];
    } else if (arg == "--directions") o.directions = parse_directions(next());
    else if (arg == "--flags") o.flags = next();
    else if (arg == "--threads") o.threads = static_cast<int>(parse_int(next(), "--threads", 1, 1024));
    else if (arg == "--repeats") o.repeats = static_cast<int>(parse_int(next(), "--repeats", 1, 100000));
    else if (arg == "--select-repeats") o.select_repeats = static_cast<int>(parse_int(next(), "--select-repeats", 1, 1000));
    else if (arg == "--gap-ms") o.gap_ms = parse_double(next(), "--gap-ms", 0, 1000);
    else if (arg == "--json") o.json = next();
    else throw UsageError(msg("unknown option '", arg, "' (see --help)"));
  }
  return o;
}

// ---- one (layer, direction) ------------------------------------------------------------

struct Result {
  std::string layer, direction, algorithm, dnnl_impl, candidates_json, note;
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

  // Choose as the meta-optimizer does: the fastest candidate whose result is right.
  double best = 0;
  std::shared_ptr<const ConvAlgorithm> chosen;
  std::size_t chosen_ws = 0;
  std::string cands;
  for (const Candidate& c : list_candidates(layer, wl.problem, mode, false)) {
    if (!c.timed) continue;
    std::cerr << "[anchors] " << layer.name << " " << r.direction << ": choosing, " << c.algorithm->name() << "..."
              << std::flush;
    try {
      const Timing t = time_algorithm(wl, *c.algorithm, c.workspace, pool, o.select_repeats, 3.0, best);
      const ConvCheck chk = compare_conv_results(wl.output(), dnnl.output(),
                                                 static_cast<std::int64_t>(wl.output_size()), DType::float32);
      std::cerr << " " << t.stats.median * 1e3 << " ms" << (chk.ok ? "" : " (differs from oneDNN)") << "\n";
      cands += msg(cands.empty() ? "" : ", ", "{\"algorithm\": ", json_string(c.algorithm->name()),
                   ", \"median_ms\": ", json_number(t.stats.median * 1e3), ", \"early_stopped\": ",
                   t.early_stopped ? "true" : "false", ", \"matches_onednn\": ", chk.ok ? "true" : "false", "}");
      if (!chk.ok) r.note += msg(c.algorithm->name(), " differs from oneDNN: ", chk.to_string(), "; ");
      if (chk.ok && !t.early_stopped && (!chosen || t.stats.median < best)) {
        best = t.stats.median;
        chosen = c.algorithm;
        chosen_ws = c.workspace;
      }
    } catch (const std::exception& e) {
      std::cerr << " failed: " << e.what() << "\n";
      r.note += msg(c.algorithm->name(), " failed: ", e.what(), "; ");
    }
  }
  r.candidates_json = "[" + cands + "]";
  if (!chosen) {
    r.ok = false;
    r.algorithm = "(none)";
    return r;
  }
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
  const Options o = parse_args(argc, argv);
  if (o.help) {
    std::cout << kUsage;
    return 0;
  }
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
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  std::printf("load average %.2f at start; OMP_WAIT_POLICY=%s%s\n", load_average(), wait_policy ? wait_policy : "(unset)",
              load_average() > o.threads + 0.5
                  ? "  WARNING: other processes are running: every timing suffers; compare only the "
                    "ratios of this run, or rerun on an idle machine"
                  : "");
  std::printf("ratio = convgraph ms / oneDNN ms (< 1: convgraph faster); 'reord' counts oneDNN's reorders "
              "from/to NCHW, 'conv' is its primitive alone\n");

  std::vector<Result> all;
  std::vector<std::string> geo_json;
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
    geo_json.push_back(JsonObject()
                           .add_str("direction", direction_name(d))
                           .add_num("convgraph_ms", gc)
                           .add_num("onednn_ms", gd)
                           .add_num("onednn_conv_only_ms", gdc)
                           .add_num("ratio", gd > 0 ? gc / gd : NAN)
                           .add_num("ratio_conv_only", gdc > 0 ? gc / gdc : NAN)
                           .add_int("layers", static_cast<std::int64_t>(cg.size()))
                           .str(4));
  }
  const PeakResult peak_end = measure_peak(o.threads);
  std::printf("\npeak FP32 at the end: %.1f GFLOP/s (start %.1f), load average %.2f%s\n", peak_end.gflops,
              peak.gflops, load_average(),
              std::abs(peak_end.gflops / peak.gflops - 1) > 0.1 ? "  WARNING: the machine's speed changed; rerun"
                                                                 : "");
  if (!o.json.empty()) {
    std::string t = msg("{\n  \"tool\": \"convgraph-anchors\",\n  \"threads\": ", o.threads, ",\n  \"repeats\": ",
                        o.repeats, ",\n  \"onednn\": ", json_string(dnnl_version), ",\n  \"flags\": ",
                        json_string(o.flags), ",\n  \"peak_gflops\": ", json_number(peak.gflops),
                        ",\n  \"peak_gflops_1t\": ", json_number(peak.gflops_1t), ",\n  \"peak_isa\": ",
                        json_string(peak.isa), ",\n  \"peak_gflops_end\": ", json_number(peak_end.gflops),
                        ",\n  \"load_average_end\": ", json_number(load_average()),
                        ",\n  \"records\": [\n");
    for (std::size_t i = 0; i < all.size(); ++i) {
      const Result& r = all[i];
      const double gf = r.cg_ms > 0 ? r.flops / (r.cg_ms * 1e-3) * 1e-9 : NAN;
      t += JsonObject()
               .add_str("layer", r.layer)
               .add_str("direction", r.direction)
               .add_str("algorithm", r.algorithm)
               .add_num("convgraph_ms", r.cg_ms)
               .add_num("onednn_ms", r.dnnl_ms)
               .add_num("onednn_conv_only_ms", r.dnnl_conv_ms)
               .add_num("ratio", r.cg_ms / r.dnnl_ms)
               .add_num("ratio_conv_only", r.cg_ms / r.dnnl_conv_ms)
               .add_num("convgraph_gflops", gf)
               .add_num("convgraph_fraction_of_peak", gf / peak.gflops)
               .add_num("convgraph_fraction_of_nominal_peak", gf / (o.threads * peak.gflops_1t))
               .add_num("onednn_fraction_of_peak", r.flops / (r.dnnl_ms * 1e-3) * 1e-9 / peak.gflops)
               .add_str("onednn_impl", r.dnnl_impl)
               .add_num("max_abs_err_vs_onednn", r.err)
               .add_bool("matches_onednn", r.ok)
               .add_str("note", r.note)
               .add("candidates", r.candidates_json)
               .str(4) +
           (i + 1 < all.size() ? ",\n" : "\n");
    }
    t += "  ],\n  \"geomean\": [\n";
    for (std::size_t i = 0; i < geo_json.size(); ++i) t += geo_json[i] + (i + 1 < geo_json.size() ? ",\n" : "\n");
    t += "  ]\n}\n";
    write_text_file(o.json, t);
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
