// Layer sets and the layer-file parser, timing statistics, JSON files and
// the machine description.
#include "benchmarks/bench_common.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/version.hpp"

namespace convgraph::bench {

// The same 13 layers as benchmarks/layers.txt (kept in sync by hand: the bench must run
// from an install tree where that file does not exist).
const char* const kStandardLayers = R"(# name N C K spatial kernel stride pad dilation groups
resnet_stem     8   3    64  224x224      7x7    2x2    3x3    1x1    1
resnet_1x1_56   8   64   256 56x56        1x1    1x1    0x0    1x1    1
resnet_3x3_56   8   64   64  56x56        3x3    1x1    1x1    1x1    1
resnet_3x3_28   8   128  128 28x28        3x3    1x1    1x1    1x1    1
resnet_3x3_14   8   256  256 14x14        3x3    1x1    1x1    1x1    1
resnet_3x3_7    8   512  512 7x7          3x3    1x1    1x1    1x1    1
vgg_3x3_112     4   64   128 112x112      3x3    1x1    1x1    1x1    1
vgg_3x3_56      4   256  256 56x56        3x3    1x1    1x1    1x1    1
alexnet_conv1   8   3    96  227x227      11x11  4x4    0x0    1x1    1
dilated_3x3     4   64   64  56x56        3x3    1x1    2x2    2x2    1
depthwise_3x3   8   256  256 28x28        3x3    1x1    1x1    1x1    256
c3d_conv2       2   64   128 16x56x56     3x3x3  1x1x1  1x1x1  1x1x1  1
c3d_conv1       2   3    64  16x112x112   3x3x3  1x1x1  1x1x1  1x1x1  1
)";

// Small layers covering each feature the algorithms special-case (1x1, stride, dilation,
// groups, a C=3 stem, 1D, 3D, odd sizes), sized so that every direction of every algorithm
// plus a full reference check takes well under a minute on 2 cores.
const char* const kQuickLayers = R"(# name N C K spatial kernel stride pad dilation groups
quick_3x3       2   32   32  28x28        3x3    1x1    1x1    1x1    1
quick_1x1       2   64   64  28x28        1x1    1x1    0x0    1x1    1
quick_stem      2   3    16  64x64        7x7    2x2    3x3    1x1    1
quick_stride2   2   16   32  31x31        3x3    2x2    1x1    1x1    1
quick_dilated   2   16   16  30x30        3x3    1x1    2x2    2x2    1
quick_depthwise 2   32   32  28x28        3x3    1x1    1x1    1x1    32
quick_conv1d    4   16   32  125          5      1      2      1      1
quick_conv3d    1   8    16  8x15x15      3x3x3  1x1x1  1x1x1  1x1x1  1
)";

namespace {

std::vector<std::string> split_ws(std::string_view line) {
  std::vector<std::string> out;
  std::istringstream is{std::string(line)};
  for (std::string tok; is >> tok;) out.push_back(tok);
  return out;
}

std::vector<std::int64_t> parse_axes(const std::string& tok, const std::string& column,
                                     const std::string& where, std::int64_t lo) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t x = tok.find('x', start);
    const std::string part = tok.substr(start, x == std::string::npos ? std::string::npos : x - start);
    out.push_back(parse_int(part, msg(where, ": ", column, " '", tok, "'"), lo, 1 << 20));
    if (x == std::string::npos) break;
    start = x + 1;
  }
  if (out.size() > 3) throw UsageError(msg(where, ": ", column, " '", tok, "' has ", out.size(), " axes (1 to 3 allowed)"));
  return out;
}

}  // namespace

std::int64_t parse_int(std::string_view text, const std::string& what, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end)
    throw UsageError(msg(what, ": '", text, "' is not an integer"));
  if (v < lo || v > hi) throw UsageError(msg(what, ": ", v, " is out of range [", lo, ", ", hi, "]"));
  return v;
}

std::vector<Layer> parse_layers(std::string_view text, const std::string& source) {
  std::vector<Layer> layers;
  std::set<std::string> names;
  std::istringstream is{std::string(text)};
  int lineno = 0;
  for (std::string line; std::getline(is, line);) {
    ++lineno;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const auto tok = split_ws(line);
    if (tok.empty()) continue;
    const std::string where = msg(source, ":", lineno);
    if (tok.size() != 10)
      throw UsageError(msg(where, ": expected 10 columns (name N C K spatial kernel stride pad dilation groups), got ",
                           tok.size()));
    Layer l;
    l.where = where;
    l.name = tok[0];
    if (!names.insert(l.name).second) throw UsageError(msg(where, ": layer name '", l.name, "' is used twice"));
    l.N = parse_int(tok[1], where + ": N", 1, 1 << 20);
    l.C = parse_int(tok[2], where + ": C", 1, 1 << 20);
    l.K = parse_int(tok[3], where + ": K", 1, 1 << 20);
    l.spatial = parse_axes(tok[4], "spatial", where, 1);
    l.kernel = parse_axes(tok[5], "kernel", where, 1);
    l.stride = parse_axes(tok[6], "stride", where, 1);
    l.pad = parse_axes(tok[7], "pad", where, 0);
    l.dilation = parse_axes(tok[8], "dilation", where, 1);
    l.groups = parse_int(tok[9], where + ": groups", 1, 1 << 20);
    const std::vector<std::int64_t>* cols[] = {&l.kernel, &l.stride, &l.pad, &l.dilation};
    const char* col_names[] = {"kernel", "stride", "pad", "dilation"};
    for (std::size_t i = 0; i < 4; ++i)
      if (cols[i]->size() != l.spatial.size())
        throw UsageError(msg(where, ": ", col_names[i], " '", tok[5 + i], "' has ", cols[i]->size(),
                             " axes, spatial '", tok[4], "' has ", l.spatial.size()));
    if (l.C % l.groups != 0 || l.K % l.groups != 0)
      throw UsageError(msg(where, ": C=", l.C, " and K=", l.K, " must be divisible by groups=", l.groups));
    for (std::size_t a = 0; a < l.spatial.size(); ++a) {
      const std::int64_t dk = (l.kernel[a] - 1) * l.dilation[a] + 1;
      if (l.spatial[a] + 2 * l.pad[a] < dk)
        throw UsageError(msg(where, ": axis ", a, ": dilated kernel ", dk, " is larger than the padded input ",
                             l.spatial[a] + 2 * l.pad[a]));
    }
    layers.push_back(std::move(l));
  }
  if (layers.empty()) throw UsageError(msg(source, ": no layers"));
  return layers;
}

std::vector<Layer> read_layer_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError(msg("--layers: cannot read '", path, "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_layers(ss.str(), path);
}

std::vector<ConvDirection> parse_directions(std::string_view text) {
  std::vector<ConvDirection> out;
  auto add = [&](ConvDirection d) {
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  };
  std::string s(text);
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    const std::string t = s.substr(start, comma - start);
    if (t == "fwd" || t == "forward") add(ConvDirection::forward);
    else if (t == "bwd_data" || t == "grad_inputs") add(ConvDirection::grad_inputs);
    else if (t == "bwd_filter" || t == "grad_weights") add(ConvDirection::grad_weights);
    else if (t == "all") {
      add(ConvDirection::forward);
      add(ConvDirection::grad_inputs);
      add(ConvDirection::grad_weights);
    } else {
      throw UsageError(msg("--directions: unknown direction '", t, "' (valid: fwd, bwd_data, bwd_filter, all)"));
    }
    start = comma + 1;
  }
  return out;
}

std::vector<std::int64_t> Layer::x_shape() const {
  std::vector<std::int64_t> s{N, C};
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

std::vector<std::int64_t> Layer::w_shape() const {
  std::vector<std::int64_t> s{K, C / groups};
  s.insert(s.end(), kernel.begin(), kernel.end());
  return s;
}

ConvParams Layer::params() const {
  ConvParams p;
  p.ndim = ndim();
  std::vector<std::pair<std::int64_t, std::int64_t>> pads;
  for (auto v : pad) pads.emplace_back(v, v);
  p.border = BorderMode(pads);
  p.stride = stride;
  p.dilation = dilation;
  p.filter_flip = false;
  p.groups = groups;
  p.name = name;
  return p;
}

std::string Layer::describe() const {
  auto axes = [](const std::vector<std::int64_t>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) s += 'x';
      s += std::to_string(v[i]);
    }
    return s;
  };
  return msg("N=", N, " C=", C, " K=", K, " ", axes(spatial), " k", axes(kernel), " s", axes(stride), " p",
             axes(pad), " d", axes(dilation), " g", groups);
}

// ---- statistics ----------------------------------------------------------------------

Stats summarize(std::vector<double> seconds) {
  Stats s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  s.median = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  s.min = seconds.front();
  s.max = seconds.back();
  s.runs = static_cast<int>(n);
  return s;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double geometric_mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double log_sum = 0;
  for (double v : values) log_sum += std::log(v);
  return std::exp(log_sum / static_cast<double>(values.size()));
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double v = -1;
  if (!(f >> v)) return -1;
  return v;
}

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

// ---- records ---------------------------------------------------------------------------

void write_json_file(const std::string& path, const Json& j) {
  write_text_file(path, j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

Json read_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError(msg("cannot read '", path, "'"));
  try {
    return Json::parse(f);
  } catch (const Json::exception& e) {
    throw UsageError(msg("'", path, "' is not valid JSON: ", e.what()));
  }
}

MachineInfo machine_info() {
  MachineInfo m;
  char host[256] = {};
  m.host = gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  m.cpu_model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      m.cpu_model = line.substr(line.find_first_not_of(" \t", line.find(':') + 1));
      break;
    }
  m.isa = cpu_isa_name(active_cpu_isa());
  m.isa_detected = cpu_isa_name(detected_cpu_isa());
  m.version = version();
  m.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  std::ifstream loadavg("/proc/loadavg");
  loadavg >> m.load_average[0] >> m.load_average[1] >> m.load_average[2];
  const std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  m.date = date;
  return m;
}

Json to_json(const MachineInfo& m) {
  return Json{{"host", m.host},
              {"cpu_model", m.cpu_model},
              {"isa", m.isa},
              {"isa_detected", m.isa_detected},
              {"version", m.version},
              {"hardware_threads", m.hardware_threads},
              {"load_average", {m.load_average[0], m.load_average[1], m.load_average[2]}},
              {"date", m.date}};
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw UsageError(msg("cannot write '", path, "'"));
}

}  // namespace convgraph::bench
