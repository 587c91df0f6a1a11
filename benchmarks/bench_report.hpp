#pragma once
// convgraph-bench's records and what is made of them besides the tables: JSON, CSV, and
// the HTML report with per-layer charts and a roofline as inline SVG
// (convgraph_bench_report.cpp).
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmarks/bench_common.hpp"

namespace convgraph::bench {

/// One algorithm on one (layer, direction), as the tables show it, with every sample.
struct Record {
  std::string layer, direction, algorithm;
  std::string status;  ///< "timed", "early_stopped", "wrong", "failed", or "skipped" (declined)
  std::string reason;  ///< why declined or not eligible, what failed or differed
  bool chosen = false, eligible = false, error_ok = false;
  bool default_choice = false;  ///< what fast_run picks without tuning (the cost model)
  double estimated_ms = NAN;    ///< the cost model's estimate (NaN: none, or not applicable)
  double median_ms = NAN, min_ms = NAN, max_ms = NAN;
  std::vector<double> samples_ms;  ///< every timed run, in run order
  double flops = 0;                ///< the direct convolution's FLOPs (effective rate for FFT/Winograd)
  double operand_bytes = 0;        ///< x, w and y, once each
  std::size_t workspace_bytes = 0;
  double max_abs_err = NAN, rel_err = NAN;
  std::string problem, check;  ///< ConvProblem::key(); what the reference check covered
  double check_fraction = 0;

  /// Ran to completion (its time means something, even when its result was wrong).
  bool ran() const { return status == "timed" || status == "early_stopped" || status == "wrong"; }
  double gflops() const { return ran() ? flops / (median_ms * 1e-3) * 1e-9 : NAN; }
  /// FLOPs per byte of compulsory traffic: the operands once, the workspace written and
  /// read once. A model, not a measurement.
  double intensity() const { return flops / (operand_bytes + 2.0 * static_cast<double>(workspace_bytes)); }
};

Json to_json(const Record& r);
/// RFC 4180 text: a header line, then one line per record (samples space-separated).
std::string records_csv(const std::vector<Record>& records);

/// oneDNN's time for one (layer, direction), from a convgraph-anchors JSON file.
struct Anchor {
  double onednn_ms = NAN;    ///< convolution_auto with its reorders from/to NCHW
  double convgraph_ms = NAN;  ///< convgraph's chosen algorithm in that run
  std::string algorithm;
};
using Anchors = std::map<std::pair<std::string, std::string>, Anchor>;  ///< (layer, direction)
/// Reads convgraph-anchors --json output; throws UsageError naming the file when it is
/// not one.
Anchors read_anchors(const std::string& path);

struct ReportInput {
  MachineInfo machine;
  std::string commit, flags, mode;
  int threads = 0, repeats = 0;
  double peak_gflops = 0;    ///< measured FP32 FMA peak on `threads` threads
  std::string peak_isa;
  double bandwidth_gbs = 0;  ///< measured triad bandwidth on `threads` threads
  std::vector<Record> records;
  /// Per layer, in run order: the declined candidates, one line each ("cpu.fft: reason").
  std::vector<std::pair<std::string, std::vector<std::string>>> declined;
  Anchors anchors;
  std::string anchors_source;  ///< the --anchors file, for the page
};

/// Writes DIR/index.html (created with DIR when missing): the machine and run, the
/// geometric means, a roofline of every candidate that ran (GFLOP/s against arithmetic
/// intensity, under the measured peak and bandwidth), and per layer one bar chart per
/// direction (median ms of each algorithm, min-max of its samples, the chosen one marked,
/// oneDNN's time when an anchor is given) with the declined candidates. Well-formed
/// XHTML with inline SVG, no scripts. Throws UsageError when DIR cannot be written.
void write_report(const std::string& dir, const ReportInput& in);

}  // namespace convgraph::bench
