// Mode presets, chaining and the flag language (docs/DESIGN.md, "Flags").
#include "convgraph/optimizer/mode.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "convgraph/core/error.hpp"
#include "convgraph/core/thread_pool.hpp"  // kMaxThreads
#include "optimizer/text_util.hpp"

namespace convgraph {

namespace {

constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();

struct FlagSpec {
  std::string_view name;
  std::string_view values;  // shown in error messages and config()
  std::string_view doc;     // config()'s doc line
};

// Every flag the language knows, in the order `to_string()` and config() print them.
constexpr FlagSpec kFlags[] = {
    {"device", "cpu|cuda", "where compiled functions run"},
    {"mode", "FAST_RUN|FAST_COMPILE|DebugMode", "preset: DebugMode re-checks every convolution against the reference"},
    {"optimizer", "fast_run|fast_compile|None", "which rewrites run (None: none, abstract convolutions then fail)"},
    {"optimizer_including", "tag[:tag...]", "rewrites and algorithms to add; algorithms carrying them go first"},
    {"optimizer_excluding", "tag[:tag...]", "rewrites and algorithms to leave out"},
    {"optimizer_requiring", "tag[:tag...]", "algorithms must carry these tags"},
    {"metaopt.verbose", "0|1|2", "meta-optimizer log: 1 candidates, times and choices; 2 also tag verdicts"},
    {"metaopt.optimizer_including", "tag[:tag...]", "meta-optimizer candidates to add (default, alternative, tags)"},
    {"metaopt.optimizer_excluding", "tag[:tag...]", "meta-optimizer candidates to leave out"},
    {"metaopt.cache", "PATH|None", "tuning cache file (empty: the default location; None: memory only)"},
    {"metaopt.budget", "SECONDS (> 0)", "seconds of timing per convolution node"},
    {"workspace_limit", "BYTES[K|M|G]|None", "largest workspace a convolution algorithm may use"},
    {"profile", "True|False", "collect per-node time and memory; print the summary at exit"},
    {"profile.file", "PATH|stderr", "where profile=True writes its summary at exit"},
    {"threads", "N (0 = default pool)", "size of each compiled function's thread pool"},
};

std::string valid_flags_text() {
  std::ostringstream os;
  for (std::size_t i = 0; i < std::size(kFlags); ++i)
    os << (i ? ", " : "") << kFlags[i].name << "=" << kFlags[i].values;
  return os.str();
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

[[noreturn]] void bad_value(std::string_view flag, std::string_view value, std::string_view valid,
                            const std::vector<std::string>& choices = {}) {
  std::string hint;
  if (!choices.empty()) {
    const std::string near = closest_match(lower(value), choices);
    if (!near.empty()) hint = msg("; did you mean '", near, "'?");
  }
  throw FlagError(msg("flag ", flag, ": invalid value '", value, "'", hint, " (valid: ", valid, ")"));
}

bool parse_bool(std::string_view flag, std::string_view v) {
  const std::string l = lower(v);
  if (l == "true" || l == "1" || l == "yes" || l == "on") return true;
  if (l == "false" || l == "0" || l == "no" || l == "off") return false;
  bad_value(flag, v, "True|False", {"true", "false"});
}

std::size_t parse_bytes(std::string_view flag, std::string_view v) {
  const std::string l = lower(v);
  if (l == "none" || l == "inf" || l == "unlimited") return kNoLimit;
  if (l.empty() || !std::isdigit(static_cast<unsigned char>(l[0])))
    bad_value(flag, v, "BYTES[K|M|G]|None");
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(l.c_str(), &end, 10);
  std::string suffix(end);
  if (!suffix.empty() && suffix.back() == 'b') suffix.pop_back();  // "64mb", "1kb"
  if (!suffix.empty() && suffix.back() == 'i') suffix.pop_back();  // "64mi(b)"
  unsigned long long scale = 1;
  if (suffix == "k") scale = 1ull << 10;
  else if (suffix == "m") scale = 1ull << 20;
  else if (suffix == "g") scale = 1ull << 30;
  else if (!suffix.empty()) bad_value(flag, v, "BYTES[K|M|G]|None");
  if (errno == ERANGE || n > kNoLimit / scale) bad_value(flag, v, "a byte count below 2^64");
  return static_cast<std::size_t>(n * scale);
}

int parse_int(std::string_view flag, std::string_view v, int lo, int hi, std::string_view valid) {
  const std::string s(v);
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE || n < lo || n > hi) bad_value(flag, v, valid);
  return static_cast<int>(n);
}

double parse_seconds(std::string_view flag, std::string_view v) {
  const std::string s(v);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(d > 0) || !std::isfinite(d)) bad_value(flag, v, "SECONDS (> 0)");
  return d;
}

void add_unique(std::vector<std::string>& to, const std::vector<std::string>& tags) {
  for (const auto& t : tags)
    if (std::find(to.begin(), to.end(), t) == to.end()) to.push_back(t);
}

std::vector<std::string> tag_list(std::string_view flag, std::string_view v) {
  std::vector<std::string> out;
  for (auto& t : split_text(v, ':')) {
    if (t.empty()) continue;  // "a::b" and a trailing ':' are harmless
    for (char c : t)
      if (std::isspace(static_cast<unsigned char>(c)) || c == '=' || c == ',')
        bad_value(flag, v, "tags separated by ':'");
    out.push_back(t);
  }
  return out;
}

std::string join_tags(const std::vector<std::string>& tags) {
  std::string s;
  for (std::size_t i = 0; i < tags.size(); ++i) s += (i ? ":" : "") + tags[i];
  return s;
}

std::string bytes_text(std::size_t n) {
  if (n == kNoLimit) return "None";
  if (n != 0 && n % (1ull << 30) == 0) return std::to_string(n >> 30) + "G";
  if (n != 0 && n % (1ull << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n != 0 && n % (1ull << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

void apply_flag(Mode& m, std::string_view key, std::string_view value) {
  const auto note = [&m](std::string_view name) {
    if (std::find(m.code_flags.begin(), m.code_flags.end(), name) == m.code_flags.end()) m.code_flags.emplace_back(name);
  };
  if (std::any_of(std::begin(kFlags), std::end(kFlags), [&](const FlagSpec& f) { return f.name == key; })) note(key);
  if (key == "mode") note("optimizer");  // a preset sets both
  if (key == "device") {
    const std::string l = lower(value);
    if (l == "cpu") m.device = DeviceKind::cpu;
    else if (l == "cuda" || l == "gpu") m.device = DeviceKind::cuda;
    else bad_value(key, value, "cpu|cuda", {"cpu", "cuda"});
  } else if (key == "mode") {
    const std::string l = lower(value);
    if (l == "fast_run") { m.optimizer = "fast_run"; m.debug = false; }
    else if (l == "fast_compile") { m.optimizer = "fast_compile"; m.debug = false; }
    else if (l == "debugmode" || l == "debug_mode") { m.optimizer = "fast_run"; m.debug = true; }
    else bad_value(key, value, "FAST_RUN|FAST_COMPILE|DebugMode", {"fast_run", "fast_compile", "debugmode"});
  } else if (key == "optimizer") {
    const std::string l = lower(value);
    if (l == "fast_run" || l == "fast_compile") m.optimizer = l;
    else if (l == "none") m.optimizer = "None";
    else bad_value(key, value, "fast_run|fast_compile|None", {"fast_run", "fast_compile", "none"});
  } else if (key == "optimizer_including") {
    add_unique(m.include_tags, tag_list(key, value));
  } else if (key == "optimizer_excluding") {
    add_unique(m.exclude_tags, tag_list(key, value));
  } else if (key == "optimizer_requiring") {
    add_unique(m.require_tags, tag_list(key, value));
  } else if (key == "metaopt.verbose") {
    m.metaopt_verbose = parse_int(key, value, 0, 2, "0|1|2");
  } else if (key == "metaopt.optimizer_including") {
    add_unique(m.metaopt_include, tag_list(key, value));
  } else if (key == "metaopt.optimizer_excluding") {
    add_unique(m.metaopt_exclude, tag_list(key, value));
  } else if (key == "metaopt.cache") {
    if (value.empty()) bad_value(key, value, "PATH|None");
    m.metaopt_cache = lower(value) == "none" ? "None" : std::string(value);
  } else if (key == "metaopt.budget") {
    m.metaopt_budget = parse_seconds(key, value);
  } else if (key == "workspace_limit") {
    m.workspace_limit = parse_bytes(key, value);
  } else if (key == "profile") {
    m.profile = parse_bool(key, value);
  } else if (key == "profile.file") {
    if (value.empty()) bad_value(key, value, "PATH|stderr");
    m.profile_file = lower(value) == "stderr" ? "" : std::string(value);
  } else if (key == "threads") {
    m.threads = parse_int(key, value, 0, kMaxThreads, "N (0 = default pool)");
  } else {
    std::vector<std::string> names;
    for (const auto& f : kFlags) names.emplace_back(f.name);
    const std::string near = closest_match(std::string(key), names);
    throw FlagError(msg("unknown flag '", key, "'", near.empty() ? "" : "; did you mean '" + near + "'?",
                        " (valid flags: ", valid_flags_text(), ")"));
  }
}

}  // namespace

Mode Mode::fast_run() { return Mode{}; }

Mode Mode::fast_compile() {
  Mode m;
  m.optimizer = "fast_compile";
  return m;
}

Mode Mode::debug_mode() {
  Mode m;
  m.debug = true;
  return m;
}

Mode Mode::none() {
  Mode m;
  m.optimizer = "None";
  return m;
}

Mode Mode::including(std::string_view tags) const {
  Mode m = *this;
  add_unique(m.include_tags, tag_list("including", tags));
  return m;
}

Mode Mode::excluding(std::string_view tags) const {
  Mode m = *this;
  add_unique(m.exclude_tags, tag_list("excluding", tags));
  return m;
}

Mode Mode::requiring(std::string_view tags) const {
  Mode m = *this;
  add_unique(m.require_tags, tag_list("requiring", tags));
  return m;
}

Mode Mode::with_flags(std::string_view flags) const { return from_flags(flags, *this); }

Mode Mode::from_flags(std::string_view flags, const Mode& base) {
  Mode m = base;
  for (const auto& item : split_text(flags, ',')) {
    const std::string entry = trim_text(item);
    if (entry.empty()) continue;  // "a=1,,b=2" and a trailing ',' are harmless
    const auto eq = entry.find('=');
    if (eq == std::string::npos)
      throw FlagError(msg("flag '", entry, "' has no value: write name=value (valid flags: ",
                          valid_flags_text(), ")"));
    apply_flag(m, trim_text(entry.substr(0, eq)), trim_text(entry.substr(eq + 1)));
  }
  return m;
}

Mode Mode::from_env() {
  Mode m = env_layer();
  m.code_flags.clear();  // these settings come from the environment, not from code
  return m;
}

namespace {

/// A flag's value as the flag language writes it.
std::string flag_value(const Mode& m, std::string_view name) {
  if (name == "device") return std::string(device_name(m.device));
  if (name == "mode") return m.debug ? "DebugMode" : m.optimizer == "fast_compile" ? "FAST_COMPILE" : "FAST_RUN";
  if (name == "optimizer") return m.optimizer;
  if (name == "optimizer_including") return join_tags(m.include_tags);
  if (name == "optimizer_excluding") return join_tags(m.exclude_tags);
  if (name == "optimizer_requiring") return join_tags(m.require_tags);
  if (name == "metaopt.verbose") return std::to_string(m.metaopt_verbose);
  if (name == "metaopt.optimizer_including") return join_tags(m.metaopt_include);
  if (name == "metaopt.optimizer_excluding") return join_tags(m.metaopt_exclude);
  if (name == "metaopt.cache") return m.metaopt_cache;
  if (name == "metaopt.budget") {
    std::ostringstream os;
    os << m.metaopt_budget;
    return os.str();
  }
  if (name == "workspace_limit") return bytes_text(m.workspace_limit);
  if (name == "profile") return m.profile ? "True" : "False";
  if (name == "profile.file") return m.profile_file.empty() ? "stderr" : m.profile_file;
  if (name == "threads") return std::to_string(m.threads);
  return {};
}

bool is_tag_list(std::string_view name) {
  return name == "optimizer_including" || name == "optimizer_excluding" || name == "optimizer_requiring" ||
         name == "metaopt.optimizer_including" || name == "metaopt.optimizer_excluding";
}

template <class M>  // Mode or const Mode
auto* tag_field(M& m, std::string_view name) {
  using List = decltype(&m.include_tags);
  if (name == "optimizer_including") return List{&m.include_tags};
  if (name == "optimizer_excluding") return List{&m.exclude_tags};
  if (name == "optimizer_requiring") return List{&m.require_tags};
  if (name == "metaopt.optimizer_including") return List{&m.metaopt_include};
  if (name == "metaopt.optimizer_excluding") return List{&m.metaopt_exclude};
  return List{nullptr};
}

/// Copies one (non-list) flag's setting.
void copy_flag(Mode& to, const Mode& from, std::string_view name) {
  if (name == "device") to.device = from.device;
  else if (name == "mode") to.debug = from.debug;
  else if (name == "optimizer") to.optimizer = from.optimizer;
  else if (name == "metaopt.verbose") to.metaopt_verbose = from.metaopt_verbose;
  else if (name == "metaopt.cache") to.metaopt_cache = from.metaopt_cache;
  else if (name == "metaopt.budget") to.metaopt_budget = from.metaopt_budget;
  else if (name == "workspace_limit") to.workspace_limit = from.workspace_limit;
  else if (name == "profile") to.profile = from.profile;
  else if (name == "profile.file") to.profile_file = from.profile_file;
  else if (name == "threads") to.threads = from.threads;
}

bool has_name(const std::vector<std::string>& v, std::string_view s) { return std::find(v.begin(), v.end(), s) != v.end(); }

/// True when `m` sets `name` in code: named in code_flags, or a value that is neither the
/// default nor the environment's (a Mode from from_env() holds the environment's values).
bool set_in_code(const Mode& m, const Mode& env, std::string_view name) {
  if (has_name(m.code_flags, name)) return true;
  // "mode" is the DebugMode switch here; the optimizer it implies is flag "optimizer".
  const auto value = [name](const Mode& x) { return name == "mode" ? std::string(x.debug ? "DebugMode" : "") : flag_value(x, name); };
  const std::string v = value(m);
  return v != value(Mode{}) && v != value(env);
}

/// The tags of `m` the environment does not have.
std::vector<std::string> own_tags(const Mode& m, const Mode& env, std::string_view name) {
  std::vector<std::string> out;
  const auto& envs = *tag_field(env, name);
  for (const auto& t : *tag_field(m, name))
    if (!has_name(envs, t)) out.push_back(t);
  return out;
}

}  // namespace

Mode Mode::env_layer() {
  const char* env = std::getenv("CONVGRAPH_FLAGS");
  if (env == nullptr || *env == '\0') return fast_run();
  try {
    return from_flags(env, fast_run());  // code_flags: the flags the environment sets
  } catch (const FlagError& e) {
    throw FlagError(msg("CONVGRAPH_FLAGS=\"", env, "\": ", e.what()));
  }
}

Mode Mode::effective() const {
  const Mode env = env_layer();
  Mode m = *this;
  m.code_flags.clear();
  for (const auto& f : kFlags) {
    if (std::vector<std::string>* tags = tag_field(m, f.name)) {
      const auto& env_tags = *tag_field(env, f.name);
      std::vector<std::string> merged = env_tags;  // the environment's tags, then the code's
      add_unique(merged, *tags);
      *tags = std::move(merged);
      if (!own_tags(*this, env, f.name).empty()) m.code_flags.emplace_back(f.name);
    } else if (set_in_code(*this, env, f.name)) {
      m.code_flags.emplace_back(f.name);  // stays code's in a later effective() too
    } else {
      copy_flag(m, env, f.name);
    }
  }
  return m;
}

std::vector<ConfigEntry> config_entries(const Mode& mode) {
  const Mode env = Mode::env_layer();
  const Mode eff = mode.effective();
  std::vector<ConfigEntry> out;
  for (const auto& f : kFlags) {
    std::string origin;
    const bool by_env = has_name(env.code_flags, f.name);
    if (is_tag_list(f.name)) {
      const bool by_code = !own_tags(mode, env, f.name).empty();
      const bool env_tags = !tag_field(env, f.name)->empty();
      origin = by_code && env_tags ? "env+code" : by_code ? "code" : env_tags ? "env" : "default";
    } else {
      origin = set_in_code(mode, env, f.name) ? "code" : by_env ? "env" : "default";
    }
    out.push_back({std::string(f.name), flag_value(eff, f.name), origin, std::string(f.values), std::string(f.doc)});
  }
  return out;
}

std::string config(const Mode& mode) {
  std::ostringstream os;
  const char* env = std::getenv("CONVGRAPH_FLAGS");
  os << "convgraph configuration (code over CONVGRAPH_FLAGS=\"" << (env ? env : "") << "\" over defaults)\n";
  for (const auto& e : config_entries(mode)) {
    os << e.name << " (" << e.values << ")\n"
       << "    Doc:    " << e.doc << "\n"
       << "    Value:  " << e.value << "\n"
       << "    From:   " << e.origin << "\n";
  }
  return os.str();
}

std::string Mode::to_string() const {
  std::ostringstream os;
  os << "device=" << device_name(device);
  if (debug) os << ",mode=DebugMode";
  os << ",optimizer=" << optimizer;
  if (!include_tags.empty()) os << ",optimizer_including=" << join_tags(include_tags);
  if (!exclude_tags.empty()) os << ",optimizer_excluding=" << join_tags(exclude_tags);
  if (!require_tags.empty()) os << ",optimizer_requiring=" << join_tags(require_tags);
  if (metaopt_verbose != 0) os << ",metaopt.verbose=" << metaopt_verbose;
  if (!metaopt_include.empty()) os << ",metaopt.optimizer_including=" << join_tags(metaopt_include);
  if (!metaopt_exclude.empty()) os << ",metaopt.optimizer_excluding=" << join_tags(metaopt_exclude);
  if (!metaopt_cache.empty()) os << ",metaopt.cache=" << metaopt_cache;
  if (metaopt_budget != Mode{}.metaopt_budget) os << ",metaopt.budget=" << metaopt_budget;
  if (workspace_limit != kNoLimit) os << ",workspace_limit=" << bytes_text(workspace_limit);
  if (profile) os << ",profile=True";
  if (!profile_file.empty()) os << ",profile.file=" << profile_file;
  if (threads != 0) os << ",threads=" << threads;
  return os.str();
}

}  // namespace convgraph
