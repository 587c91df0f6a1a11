// convgraph-bench's records as JSON and CSV, and the HTML report. The charts are SVG drawn
// here (bars with sample whiskers, a log-log roofline), so the page needs nothing but a
// browser; all text goes through xml() since layer names come from user files.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "benchmarks/bench_report.hpp"
#include "convgraph/core/error.hpp"
#include "core/utf8.hpp"

namespace convgraph::bench {

Json to_json(const Record& r) {
  return Json{{"layer", r.layer},
              {"direction", r.direction},
              {"algorithm", r.algorithm},
              {"median_ms", r.median_ms},
              {"min_ms", r.min_ms},
              {"max_ms", r.max_ms},
              {"runs", r.samples_ms.size()},
              {"samples_ms", r.samples_ms},
              {"gflops", r.gflops()},
              {"workspace_bytes", r.workspace_bytes},
              {"max_abs_err", r.max_abs_err},
              {"rel_err", r.rel_err},
              {"error_ok", r.error_ok},
              {"chosen", r.chosen},
              {"default_choice", r.default_choice},
              {"estimated_ms", r.estimated_ms},
              {"eligible", r.eligible},
              {"status", r.status},
              {"reason", r.reason},
              {"flops", r.flops},
              {"operand_bytes", r.operand_bytes},
              {"arithmetic_intensity", r.intensity()},
              {"problem", r.problem},
              {"check", r.check},
              {"check_fraction", r.check_fraction}};
}

namespace {

std::string num(double v, const char* format = "%.6g") {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string records_csv(const std::vector<Record>& records) {
  std::string out =
      "layer,direction,algorithm,status,chosen,eligible,median_ms,min_ms,max_ms,runs,gflops,workspace_bytes,"
      "max_abs_err,rel_err,arithmetic_intensity,flops,reason,samples_ms\r\n";
  for (const Record& r : records) {
    std::string samples;
    for (double s : r.samples_ms) samples += (samples.empty() ? "" : " ") + num(s);
    const std::vector<std::string> fields = {
        r.layer, r.direction, r.algorithm, r.status, r.chosen ? "1" : "0", r.eligible ? "1" : "0",
        num(r.median_ms), num(r.min_ms), num(r.max_ms), std::to_string(r.samples_ms.size()), num(r.gflops()),
        std::to_string(r.workspace_bytes), num(r.max_abs_err), num(r.rel_err), num(r.intensity()), num(r.flops),
        r.reason, samples};
    for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_field(fields[i]);
    out += "\r\n";
  }
  return out;
}

Anchors read_anchors(const std::string& path) {
  auto number = [](const Json& r, const char* key) {
    return r.contains(key) && r[key].is_number() ? r[key].get<double>() : NAN;
  };
  Anchors out;
  try {
    const Json j = read_json_file(path);
    if (j.value("tool", "") != "convgraph-anchors") throw UsageError("its \"tool\" is not \"convgraph-anchors\"");
    for (const Json& r : j.at("records")) {
      Anchor a{number(r, "onednn_ms"), number(r, "convgraph_ms"), r.value("algorithm", "")};
      if (a.onednn_ms > 0) out[{r.at("layer").get<std::string>(), r.at("direction").get<std::string>()}] = a;
    }
  } catch (const std::exception& e) {
    throw UsageError(msg("--anchors: '", path, "' is not a convgraph-anchors --json file: ", e.what()));
  }
  return out;
}

// ---- the HTML report -----------------------------------------------------------------------

namespace {

/// Text for XML character data and attribute values: markup characters as entities;
/// control characters XML 1.0 forbids and bytes that are not UTF-8 as U+FFFD.
std::string xml(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = detail::utf8_length(s.substr(i));
    if (n == 0 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r')) {
      out += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string ms_text(double ms) { return ms >= 100 ? num(ms, "%.0f ms") : ms >= 1 ? num(ms, "%.2f ms") : num(ms, "%.3f ms"); }

/// An SVG image built element by element; coordinates in pixels, y downwards.
class Svg {
 public:
  Svg(double width, double height, std::string_view label) : width_(width) {
    os_ << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\"" << num(height)
        << "\" viewBox=\"0 0 " << num(width) << ' ' << num(height) << "\" role=\"img\" aria-label=\"" << xml(label)
        << "\">\n";
  }
  double width() const { return width_; }
  void rect(double x, double y, double w, double h, std::string_view fill, std::string_view title) {
    os_ << "<rect x=\"" << c(x) << "\" y=\"" << c(y) << "\" width=\"" << c(std::max(w, 0.5)) << "\" height=\"" << c(h)
        << "\" fill=\"" << fill << "\"><title>" << xml(title) << "</title></rect>\n";
  }
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
            std::string_view dash = {}) {
    os_ << "<line x1=\"" << c(x1) << "\" y1=\"" << c(y1) << "\" x2=\"" << c(x2) << "\" y2=\"" << c(y2)
        << "\" stroke=\"" << stroke << "\" stroke-width=\"" << num(width) << '"';
    if (!dash.empty()) os_ << " stroke-dasharray=\"" << dash << '"';
    os_ << "/>\n";
  }
  void text(double x, double y, std::string_view s, std::string_view anchor = "start", std::string_view cls = {}) {
    os_ << "<text x=\"" << c(x) << "\" y=\"" << c(y) << "\" text-anchor=\"" << anchor << '"';
    if (!cls.empty()) os_ << " class=\"" << cls << '"';
    os_ << '>' << xml(s) << "</text>\n";
  }
  void circle(double x, double y, double r, std::string_view fill, bool emphasis, std::string_view title) {
    os_ << "<circle cx=\"" << c(x) << "\" cy=\"" << c(y) << "\" r=\"" << c(r) << "\" fill=\"" << fill << '"'
        << (emphasis ? " stroke=\"black\" stroke-width=\"1.5\"" : " fill-opacity=\"0.6\"") << "><title>" << xml(title)
        << "</title></circle>\n";
  }
  std::string str() const { return os_.str() + "</svg>\n"; }

 private:
  static std::string c(double v) { return num(v, "%.1f"); }
  double width_;
  std::ostringstream os_;
};

constexpr const char* kChosen = "#1a9850", *kCandidate = "#4575b4", *kAlternative = "#91bfdb",
                      *kEarlyStopped = "#bdbdbd", *kWrong = "#d73027", *kOneDnn = "#f46d43";

const char* direction_color(const std::string& d) {
  return d == "fwd" ? "#4575b4" : d == "bwd_data" ? "#f46d43" : "#1a9850";
}

/// 1, 2 or 5 times a power of ten, about a quarter of `span`.
double nice_step(double span) {
  const double raw = span / 4, p = std::pow(10.0, std::floor(std::log10(raw)));
  return raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
}

/// One (layer, direction): a bar per algorithm that ran (median), its samples' min-max as
/// a whisker, the chosen one marked, oneDNN's time when an anchor was given.
std::string bar_chart(const std::string& title, std::vector<const Record*> rows, const Anchor* anchor) {
  std::sort(rows.begin(), rows.end(), [](const Record* a, const Record* b) { return a->median_ms < b->median_ms; });
  const double row_h = 20, top = 24, label_w = 170, bar_w = 380, bottom = 26;
  const std::size_t n = rows.size() + (anchor ? 1 : 0);
  double xmax = anchor ? anchor->onednn_ms : 0;
  for (const Record* r : rows) xmax = std::max({xmax, r->median_ms, r->max_ms});
  if (!(xmax > 0)) xmax = 1;
  Svg svg(760, top + row_h * static_cast<double>(n) + bottom, title);
  svg.text(0, 15, title, "start", "title");
  const double x0 = label_w, scale = bar_w / xmax, axis_y = top + row_h * static_cast<double>(n) + 2;
  const double step = nice_step(xmax);
  for (double t = 0; t <= xmax * 1.0001; t += step) {
    svg.line(x0 + t * scale, top - 2, x0 + t * scale, axis_y, "#dddddd");
    svg.text(x0 + t * scale, axis_y + 14, ms_text(t), "middle", "axis");
  }
  double y = top;
  for (const Record* r : rows) {
    const char* fill = r->status == "wrong"           ? kWrong
                       : r->status == "early_stopped" ? kEarlyStopped
                       : r->chosen                    ? kChosen
                       : r->eligible                  ? kCandidate
                                                      : kAlternative;
    const std::string note = r->status == "wrong"           ? "  WRONG"
                             : r->status == "early_stopped" ? "  warm-up only (early stop)"
                             : r->chosen                    ? "  chosen"
                             : r->eligible                  ? ""
                                                            : "  alternative, never chosen";
    svg.text(x0 - 6, y + 14, r->algorithm, "end");
    svg.rect(x0, y + 3, r->median_ms * scale, row_h - 6, fill,
             msg(r->algorithm, ": median ", ms_text(r->median_ms), ", min ", ms_text(r->min_ms), ", max ",
                 ms_text(r->max_ms), " over ", r->samples_ms.size(), " run(s); ", num(r->gflops(), "%.1f"),
                 " GFLOP/s", note));
    if (r->samples_ms.size() > 1) {  // the spread of the samples
      const double mid = y + row_h / 2;
      svg.line(x0 + r->min_ms * scale, mid, x0 + r->max_ms * scale, mid, "black");
      svg.line(x0 + r->min_ms * scale, mid - 4, x0 + r->min_ms * scale, mid + 4, "black");
      svg.line(x0 + r->max_ms * scale, mid - 4, x0 + r->max_ms * scale, mid + 4, "black");
    }
    svg.text(x0 + bar_w + 8, y + 14, ms_text(r->median_ms) + note);
    y += row_h;
  }
  if (anchor) {
    svg.text(x0 - 6, y + 14, "oneDNN", "end");
    svg.rect(x0, y + 3, anchor->onednn_ms * scale, row_h - 6, kOneDnn,
             msg("oneDNN convolution_auto (reorders from/to NCHW counted): ", ms_text(anchor->onednn_ms)));
    svg.text(x0 + bar_w + 8, y + 14, ms_text(anchor->onednn_ms) + "  oneDNN (convgraph-anchors)");
  }
  return svg.str();
}

/// Every candidate that ran, GFLOP/s against arithmetic intensity on log-log axes, under
/// the measured roofs: min(peak, bandwidth x intensity).
std::string roofline(const ReportInput& in) {
  std::vector<const Record*> pts;
  for (const Record& r : in.records)
    if (r.ran() && r.gflops() > 0 && std::isfinite(r.gflops()) && r.intensity() > 0) pts.push_back(&r);
  const double W = 760, H = 470, left = 70, right = 20, top = 20, bottom = 60;
  Svg svg(W, H, "roofline: GFLOP/s against arithmetic intensity");
  if (pts.empty()) {
    svg.text(W / 2, H / 2, "no candidate ran", "middle");
    return svg.str();
  }
  double ai_lo = 1e300, ai_hi = 0, g_lo = 1e300, g_hi = std::max(in.peak_gflops, 0.0);
  for (const Record* r : pts) {
    ai_lo = std::min(ai_lo, r->intensity());
    ai_hi = std::max(ai_hi, r->intensity());
    g_lo = std::min(g_lo, r->gflops());
    g_hi = std::max(g_hi, r->gflops());
  }
  const bool roofs = in.peak_gflops > 0 && in.bandwidth_gbs > 0;
  const double ridge = roofs ? in.peak_gflops / in.bandwidth_gbs : ai_hi;
  const double xl = std::floor(std::log10(ai_lo)), xh = std::max(std::ceil(std::log10(std::max(ai_hi, ridge) * 2)), xl + 1);
  const double yl = std::floor(std::log10(g_lo)), yh = std::max(std::ceil(std::log10(g_hi * 1.5)), yl + 1);
  auto px = [&](double ai) { return left + (std::log10(ai) - xl) / (xh - xl) * (W - left - right); };
  auto py = [&](double g) { return H - bottom - (std::log10(g) - yl) / (yh - yl) * (H - top - bottom); };
  for (double e = xl; e <= xh; ++e) {
    svg.line(px(std::pow(10, e)), top, px(std::pow(10, e)), H - bottom, "#dddddd");
    svg.text(px(std::pow(10, e)), H - bottom + 16, num(std::pow(10, e), "%g"), "middle", "axis");
  }
  for (double e = yl; e <= yh; ++e) {
    svg.line(left, py(std::pow(10, e)), W - right, py(std::pow(10, e)), "#dddddd");
    svg.text(left - 6, py(std::pow(10, e)) + 4, num(std::pow(10, e), "%g"), "end", "axis");
  }
  svg.text((left + W - right) / 2, H - bottom + 36,
           "arithmetic intensity, FLOP per byte (operands once, workspace written and read once)", "middle");
  svg.text(14, top - 6, "GFLOP/s (direct-convolution FLOPs / median time)", "start");
  if (roofs) {  // bandwidth slope up to the ridge, then the flat peak
    const double x_start = std::max(std::pow(10, xl), std::pow(10, yl) / in.bandwidth_gbs);
    if (x_start < ridge)
      svg.line(px(x_start), py(in.bandwidth_gbs * x_start), px(ridge), py(in.peak_gflops), "#555555", 2);
    svg.line(px(std::max(ridge, std::pow(10, xl))), py(in.peak_gflops), W - right, py(in.peak_gflops), "#555555", 2);
    svg.text(W - right - 4, py(in.peak_gflops) - 6,
             msg("peak ", num(in.peak_gflops, "%.1f"), " GFLOP/s (", in.peak_isa, " FMA loop, ", in.threads,
                 " threads)"),
             "end");
    svg.text(px(std::max(x_start, std::pow(10, xl))) + 6, py(in.bandwidth_gbs * std::max(x_start, std::pow(10, xl))) - 8,
             msg("triad ", num(in.bandwidth_gbs, "%.1f"), " GB/s"), "start");
  }
  for (int pass = 0; pass < 2; ++pass)  // the chosen ones on top
    for (const Record* r : pts)
      if (r->chosen == (pass == 1))
        svg.circle(px(r->intensity()), py(r->gflops()), r->chosen ? 5.5 : 3.5, direction_color(r->direction),
                   r->chosen,
                   msg(r->layer, " ", r->direction, ": ", r->algorithm, ", ", num(r->gflops(), "%.1f"), " GFLOP/s at ",
                       num(r->intensity(), "%.3g"), " FLOP/B", r->chosen ? " (chosen)" : ""));
  double lx = left + 10;
  for (const char* d : {"fwd", "bwd_data", "bwd_filter"}) {
    svg.circle(lx, top + 10, 4, direction_color(d), false, d);
    svg.text(lx + 8, top + 14, d);
    lx += 90;
  }
  svg.circle(lx, top + 10, 5.5, "white", true, "chosen");
  svg.text(lx + 9, top + 14, "chosen (outlined)");
  return svg.str();
}

constexpr const char* kStyle =
    "body{font-family:sans-serif;max-width:64em;margin:1em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:0.5em 0}td,th{padding:2px 10px;text-align:left;vertical-align:top}"
    "tr:nth-child(even){background:#f4f4f4}svg{display:block;margin:0.4em 0 1em 0}"
    "svg text{font-size:12px;font-family:sans-serif}svg text.title{font-weight:bold;font-size:13px}"
    "svg text.axis{fill:#666;font-size:11px}.note{color:#666}";

}  // namespace

void write_report(const std::string& dir, const ReportInput& in) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
    << "<title>convgraph-bench report</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n"
    << "<h1>convgraph-bench report</h1>\n<table class=\"machine\">\n";
  const MachineInfo& m = in.machine;
  auto row = [&](const std::string& k, const std::string& v) {
    h << "<tr><th>" << xml(k) << "</th><td>" << xml(v) << "</td></tr>\n";
  };
  row("date", m.date);
  row("host", m.host);
  row("CPU", msg(m.cpu_model, ", ", m.hardware_threads, " hardware threads"));
  row("CPU kernels", msg(m.isa, " (this CPU supports ", m.isa_detected, ")"));
  row("convgraph", msg(m.version, ", commit ", in.commit));
  row("threads, repeats", msg(in.threads, " threads; median of ", in.repeats, " timed runs after one warm-up"));
  row("load average", msg(num(m.load_average[0], "%.2f"), " / ", num(m.load_average[1], "%.2f"), " / ",
                          num(m.load_average[2], "%.2f"), " (1/5/15 min, at the start)"));
  row("flags", in.flags.empty() ? "(none)" : in.flags);
  row("mode", in.mode);
  row("peak, bandwidth", in.peak_gflops > 0 ? msg(num(in.peak_gflops, "%.1f"), " GFLOP/s (", in.peak_isa,
                                                  " FMA loop), ", num(in.bandwidth_gbs, "%.1f"), " GB/s (triad)")
                                            : std::string("not measured"));
  if (!in.anchors_source.empty()) row("oneDNN times", msg("from ", in.anchors_source, " (convgraph-anchors)"));
  h << "</table>\n";

  // Layers and directions in run order.
  std::vector<std::string> layers, directions;
  for (const Record& r : in.records) {
    if (std::find(layers.begin(), layers.end(), r.layer) == layers.end()) layers.push_back(r.layer);
    if (std::find(directions.begin(), directions.end(), r.direction) == directions.end())
      directions.push_back(r.direction);
  }
  h << "<h2>Summary</h2>\n<table>\n<tr><th>direction</th><th>geometric mean of the chosen median</th>"
    << "<th>layers</th></tr>\n";
  std::map<std::string, int> wins;
  for (const std::string& d : directions) {
    std::vector<double> ms;
    for (const Record& r : in.records)
      if (r.direction == d && r.chosen) {
        ms.push_back(r.median_ms);
        ++wins[r.algorithm];
      }
    h << "<tr><td>" << xml(d) << "</td><td>" << xml(ms.empty() ? "-" : ms_text(geometric_mean(ms))) << "</td><td>"
      << ms.size() << "</td></tr>\n";
  }
  h << "</table>\n<p>chosen:";
  for (const auto& [name, n] : wins) h << ' ' << xml(name) << " &#215;" << n;
  h << "</p>\n<h2>Roofline</h2>\n<p class=\"note\">Every candidate that ran, one point per (layer, direction, "
    << "algorithm); the chosen ones outlined. Hover a point for its name. FFT and Winograd do fewer "
    << "multiplications than the direct convolution whose FLOPs are counted, so they can sit above the peak.</p>\n"
    << roofline(in);

  for (std::size_t li = 0; li < layers.size(); ++li) {
    const std::string& layer = layers[li];
    h << "<h2 id=\"layer-" << li << "\">" << xml(layer) << "</h2>\n";
    for (const std::string& d : directions) {
      std::vector<const Record*> rows;
      std::string problem, check, failed;
      for (const Record& r : in.records) {
        if (r.layer != layer || r.direction != d) continue;
        problem = r.problem;
        check = r.check;
        if (r.ran()) rows.push_back(&r);
        if (r.status == "failed") failed += msg(failed.empty() ? "" : "; ", r.algorithm, ": ", r.reason);
      }
      if (problem.empty()) continue;
      const auto a = in.anchors.find({layer, d});
      const Anchor* anchor = a == in.anchors.end() ? nullptr : &a->second;
      h << bar_chart(msg(layer, "  ", d), rows, anchor) << "<p class=\"note\">" << xml(problem)
        << "; checked against the reference on " << xml(check);
      const auto chosen = std::find_if(rows.begin(), rows.end(), [](const Record* r) { return r->chosen; });
      if (anchor && chosen != rows.end())
        h << ". Chosen " << xml((*chosen)->algorithm) << ' ' << xml(ms_text((*chosen)->median_ms)) << " vs oneDNN "
          << xml(ms_text(anchor->onednn_ms)) << ": ratio " << num((*chosen)->median_ms / anchor->onednn_ms, "%.2f");
      if (!failed.empty()) h << ". FAILED: " << xml(failed);
      h << ".</p>\n";
    }
    for (const auto& [name, lines] : in.declined)
      if (name == layer && !lines.empty()) {
        h << "<p>Declined (not timed):</p>\n<ul>\n";
        for (const auto& l : lines) h << "<li>" << xml(l) << "</li>\n";
        h << "</ul>\n";
      }
  }
  h << "</body>\n</html>\n";
  try {
    std::filesystem::create_directories(dir);
  } catch (const std::filesystem::filesystem_error& e) {
    throw UsageError(msg("--report: cannot create '", dir, "': ", e.code().message()));
  }
  write_text_file((std::filesystem::path(dir) / "index.html").string(), h.str());
}

}  // namespace convgraph::bench
