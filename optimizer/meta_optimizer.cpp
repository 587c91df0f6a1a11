// The meta-optimizer (conv_meta): time each applicable candidate on random data of the
// node's shapes, verify it against the reference, keep the fastest; remember the result.
#include "convgraph/optimizer/meta_optimizer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include "convgraph/backends/cpu/reference.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/core/function_graph.hpp"
#include "convgraph/optimizer/compile_stats.hpp"
#include "convgraph/optimizer/tuning_agreement.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "backends/device_buffers.hpp"
#include "optimizer/passes.hpp"
#include "optimizer/text_util.hpp"

namespace convgraph {

namespace {

class SteadyClock final : public MetaClock {
 public:
  double now() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void fill_uniform(Tensor& t, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  if (t.dtype() == DType::float32) {
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(dist(rng));
  } else {
    double* p = t.data<double>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  }
}

void fill_nan(Tensor& t) {
  if (t.dtype() == DType::float32) std::fill_n(t.data<float>(), t.numel(), std::nanf(""));
  else std::fill_n(t.data<double>(), t.numel(), std::nan(""));
}

/// The three operands of `p` as host tensors, inputs random, in the direction's roles.
struct TuneData {
  Tensor in0, in1, out, want;
};

TuneData make_data(const ConvProblem& p) {
  std::mt19937_64 rng(0x5eed + static_cast<std::uint64_t>(p.flops()));
  TuneData d;
  switch (p.direction) {
    case ConvDirection::forward:
      d.in0 = Tensor(p.dtype, p.x_shape()), d.in1 = Tensor(p.dtype, p.w_shape()), d.out = Tensor(p.dtype, p.y_shape());
      break;
    case ConvDirection::grad_inputs:
      d.in0 = Tensor(p.dtype, p.w_shape()), d.in1 = Tensor(p.dtype, p.y_shape()), d.out = Tensor(p.dtype, p.x_shape());
      break;
    case ConvDirection::grad_weights:
      d.in0 = Tensor(p.dtype, p.x_shape()), d.in1 = Tensor(p.dtype, p.y_shape()), d.out = Tensor(p.dtype, p.w_shape());
      break;
  }
  fill_uniform(d.in0, rng);
  fill_uniform(d.in1, rng);
  d.want = Tensor(p.dtype, d.out.shape());
  reference_conv(p, conv_tensors(p.direction, d.in0.raw(), d.in1.raw(), d.want.raw()));
  return d;
}

/// The operands as one device sees them: host data itself on the CPU, copies elsewhere;
/// a workspace grown to what each candidate asks for in turn.
struct DeviceData {
  DeviceKind device;
  Tensor in0, in1, out;
  std::shared_ptr<Storage> ws;
  std::size_t ws_bytes = 0;

  DeviceData(const TuneData& host, DeviceKind dev)
      : device(dev), in0(copy_to(host.in0, dev)), in1(copy_to(host.in1, dev)) {}

  /// A workspace of at least `need` bytes, or the reason there is none: a candidate's own
  /// workspace, so one greedy candidate cannot cost the others theirs. The request is
  /// capped by the device's free memory (asking for more only empties caches to fail).
  std::optional<std::string> ensure_workspace(std::size_t need) {
    if (need <= ws_bytes) return std::nullopt;
    ws.reset();  // the old one counts as free for the new request
    ws_bytes = 0;
    if (const std::optional<std::size_t> free = device_memory_available(device); free && need > *free)
      return msg("needs ", bytes_text_iec(static_cast<double>(need)), " of workspace, ",
                 bytes_text_iec(static_cast<double>(*free)), " free on ", device_name(device));
    try {
      ws = allocate_on(device, need);
      ws_bytes = need;
    } catch (const DeviceContextError&) {
      throw;
    } catch (const Error& e) {
      return msg("cannot allocate ", bytes_text_iec(static_cast<double>(need)), " of workspace: ", e.what());
    }
    return std::nullopt;
  }
  void reset_output(const TuneData& host) {
    Tensor garbage(host.out.dtype(), host.out.shape());
    fill_nan(garbage);
    if (device == DeviceKind::cpu) out = garbage;
    else out = copy_to(garbage, device);
  }
};

std::string gflops_text(const ConvProblem& p, double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GFLOP/s", seconds > 0 ? p.flops() / seconds * 1e-9 : 0.0);
  return buf;
}

std::string padded(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::shared_ptr<MetaClock> steady_meta_clock() { return std::make_shared<SteadyClock>(); }

namespace {

// One tune_conv call: the problem, the options, the clock and the log they share.
struct Tuning {
  const ConvProblem& p;
  const TuneOptions& o;
  MetaClock& clock;
  ThreadPool& pool;

  void say(const std::string& line) const {
    if (o.verbose < 1) return;
    if (o.log) o.log(line);
    else std::cerr << line << '\n';
  }

  // Fills `out` from a valid cache entry for `key` (an algorithm still usable, same
  // version); says why a stale entry is ignored.
  bool from_cache(const std::string& key, const std::vector<AlgorithmPtr>& usable, TuneOutcome& out) const {
    const TuningEntry* e = o.cache ? o.cache->find(key) : nullptr;
    if (!e) return false;
    for (const auto& a : usable)
      if (a->name() == e->algorithm && a->version() == e->version) {
        out.winner = a;
        out.cache_hit = true;
        out.seconds = e->seconds;
        out.why = msg("cache hit: ", seconds_text(e->seconds), " when tuned",
                      o.cache->path().empty() ? "" : ", " + o.cache->path());
        say(msg("[metaopt]   cache hit -> ", a->name(), " (", seconds_text(e->seconds), ", ",
                gflops_text(p, e->seconds), " when tuned); no timing"));
        return true;
      }
    say(msg("[metaopt]   stale cache entry (", e->algorithm, " v", e->version, " is no longer a candidate); re-tuning"));
    return false;
  }

  // One run of `a` on d's operands and workspace, in seconds.
  double timed_run(const AlgorithmPtr& a, DeviceData& d) const {
    const DeviceKind dev = a->device();
    const ConvTensors t = conv_tensors(p.direction, d.in0.raw(), d.in1.raw(), d.out.raw());
    const ConvContext cc{dev == DeviceKind::cpu ? &pool : nullptr, d.ws ? d.ws->data : nullptr, d.ws_bytes, nullptr};
    const double t0 = clock.now();
    a->run(p, t, cc);
    synchronize(dev);
    return clock.now() - t0;
  }

  // Times `a`: a warm-up run checked against the reference, then repeated runs. Their
  // median and fastest, or nothing when it is skipped, rejected, stopped early (warm-up
  // over early_stop x `best`, when there is a best) or fails; each case is said.
  struct Times {
    double median, fastest;
  };
  std::optional<Times> time(const AlgorithmPtr& a, const TuneData& data, std::map<DeviceKind, DeviceData>& on_device,
                             std::optional<double> best) const {
    const std::string name = padded(a->name(), 18);
    const DeviceKind dev = a->device();
    std::size_t need = 0;
    std::vector<double> times;
    try {
      need = a->workspace_bytes(p);
      auto it = on_device.find(dev);
      if (it == on_device.end()) it = on_device.emplace(dev, DeviceData(data, dev)).first;
      DeviceData& d = it->second;
      if (const std::optional<std::string> why = d.ensure_workspace(need)) {
        say(msg("[metaopt]   ", name, " skipped: ", *why));
        return std::nullopt;
      }
      d.reset_output(data);  // NaN garbage: catches algorithms that leave part of the output unwritten
      const double warm = timed_run(a, d);
      const Tensor got = copy_to_host(d.out);
      const ConvCheck check = compare_conv_results(got.raw(), data.want.raw(), data.want.numel(), p.dtype);
      if (!check.ok) {
        say(msg("[metaopt]   ", name, " rejected: wrong result, ", check.to_string()));
        return std::nullopt;
      }
      if (best && warm > o.early_stop * *best) {
        say(msg("[metaopt]   ", name, " ", seconds_text(warm), " (warm-up) ", gflops_text(p, warm),
                "  not timed further: over ", o.early_stop, "x the best"));
        return std::nullopt;
      }
      double total = 0;
      while (static_cast<int>(times.size()) < o.min_runs || (static_cast<int>(times.size()) < o.max_runs && total < 0.02)) {
        times.push_back(timed_run(a, d));
        total += times.back();
      }
    } catch (const DeviceContextError& e) {
      // Every later candidate would fail the same way: timing them would only pick a
      // winner by accident. Stop, and let the caller see why.
      say(msg("[metaopt]   ", name, " failed: ", e.what(), "; the device context is lost, tuning stops"));
      throw;
    } catch (const std::exception& e) {  // allocation failure, a device error...: skipped, not fatal
      say(msg("[metaopt]   ", name, " failed: ", e.what()));
      return std::nullopt;
    }
    const double med = median(times);
    say(msg("[metaopt]   ", name, " ", padded(seconds_text(med), 10), " ", padded(gflops_text(p, med), 16),
            " ws ", bytes_text_iec(static_cast<double>(need)), "  (median of ", times.size(), ")"));
    return Times{med, *std::min_element(times.begin(), times.end())};
  }

  // `runs` more timed runs of `a`, already checked by time() on the same operands (its
  // workspace made again if a later candidate's request dropped it). Throws what run() does.
  std::vector<double> more(const AlgorithmPtr& a, std::map<DeviceKind, DeviceData>& on_device, int runs) const {
    DeviceData& d = on_device.at(a->device());
    if (const std::optional<std::string> why = d.ensure_workspace(a->workspace_bytes(p))) throw MemoryError(*why);
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) times.push_back(timed_run(a, d));
    return times;
  }
};

}  // namespace

int confirm_challenger(const std::vector<double>& medians, const std::vector<double>& fastest, double margin) {
  if (fastest.size() != medians.size())
    throw ValueError(msg("confirm_challenger: ", medians.size(), " medians but ", fastest.size(), " fastest runs"));
  if (medians.size() < 2) return -1;
  if (medians[1] <= margin * medians[0]) return 1;
  for (std::size_t i = 1; i < medians.size(); ++i)
    if (fastest[i] < medians[0]) return static_cast<int>(i);
  return -1;
}

std::pair<double, double> alternating_medians(int rounds, const std::function<std::vector<double>(int)>& time_runs) {
  if (rounds < 1) throw ValueError(msg("alternating_medians: rounds must be at least 1, got ", rounds));
  std::vector<double> runs[2];
  for (int round = 0; round < rounds; ++round)
    for (int i = 0; i < 2; ++i) {
      const int c = (round + i) % 2;
      const std::vector<double> more = time_runs(c);
      runs[c].insert(runs[c].end(), more.begin(), more.end());
    }
  return {median(runs[0]), median(runs[1])};
}

TuneOutcome tune_conv(const ConvProblem& p, const ConvCandidates& candidates, const std::string& label,
                      const TuneOptions& o) {
  SteadyClock steady;
  const Tuning tuning{p, o, o.clock ? *o.clock : steady, o.pool ? *o.pool : ThreadPool::default_pool()};
  auto say = [&](const std::string& line) { tuning.say(line); };

  std::vector<AlgorithmPtr> usable = candidates.usable();
  std::size_t in_set = 0;
  for (const auto& v : candidates.verdicts) in_set += v.by_tags ? 0 : 1;
  char head[64];
  std::snprintf(head, sizeof head, "%.3g GFLOP", p.flops() * 1e-9);
  say(msg("[metaopt] ", label, ": ", p.key(), " (", head, "; ", in_set, " candidates, ", usable.size(),
          " applicable)"));
  // Which algorithms the tags left out is noise at level 1; why a candidate does not apply is not.
  auto report_skips = [&] {
    for (const auto& v : candidates.verdicts)
      if (!v.reason.empty() && (!v.by_tags || o.verbose >= 2))
        say(msg("[metaopt]   ", padded(v.algorithm->name(), 18), v.by_tags ? " not a candidate: " : " skipped: ", v.reason));
  };

  TuneOutcome out;
  if (usable.empty()) {
    report_skips();
    say("[metaopt]   no applicable candidate; falling back to priority lowering");
    return out;
  }
  const std::string key = TuningCache::make_key(o.device, p, usable);
  if (tuning.from_cache(key, usable, out)) return out;
  report_skips();
  if (p.dtype != DType::float32 && p.dtype != DType::float64) {
    say(msg("[metaopt]   cannot time ", dtype_name(p.dtype), " problems on the host yet; falling back to priority lowering"));
    return out;
  }

  const double ref_start = tuning.clock.now();
  const TuneData data = make_data(p);
  if (o.verbose >= 2) say(msg("[metaopt]   reference computed in ", seconds_text(tuning.clock.now() - ref_start)));
  std::map<DeviceKind, DeviceData> on_device;  // operands per device, made on first use

  const double start = tuning.clock.now();
  std::optional<double> best;  // for the early stop
  struct Timed {
    AlgorithmPtr algorithm;
    double median, fastest;
  };
  std::vector<Timed> timed;  // in priority order
  for (const auto& a : usable) {
    if (!timed.empty() && tuning.clock.now() - start > o.budget_seconds) {
      say(msg("[metaopt]   ", padded(a->name(), 18), " skipped: the node's time budget of ",
              seconds_text(o.budget_seconds), " is spent"));
      continue;
    }
    const auto t = tuning.time(a, data, on_device, best);
    if (!t) continue;
    if (!best || t->median < *best) best = t->median;
    timed.push_back({a, t->median, t->fastest});
  }
  out.timed = static_cast<int>(timed.size());
  if (timed.empty()) {
    say("[metaopt]   no candidate could be timed; falling back to priority lowering");
    return out;
  }
  // The fastest first; ties keep the higher-priority candidate.
  std::stable_sort(timed.begin(), timed.end(), [](const Timed& u, const Timed& v) { return u.median < v.median; });

  // A close call is timed again: the leader and the runner-up in alternating rounds, and
  // the medians of these runs alone decide. Each candidate's first runs came in one burst,
  // and a shared machine slows down for seconds at a time (the 2-vCPU VMs' FMA rate moves
  // by a third within minutes): a burst in a slow spell could make the choice on its own.
  // So is a slower candidate whose fastest run beat the leader's median (confirm_challenger,
  // which picks the one to time again). Only
  // when the rounds fit in what is left of the budget, as the first pass timed them.
  const int runs = std::max(1, o.min_runs);
  std::vector<double> medians, fastest;
  for (const Timed& t : timed) medians.push_back(t.median), fastest.push_back(t.fastest);
  const int c = o.confirm_rounds > 0 ? confirm_challenger(medians, fastest, o.confirm_margin) : -1;
  if (c > 0 && tuning.clock.now() - start + o.confirm_rounds * runs * (timed[0].median + timed[c].median) <=
                   o.budget_seconds) {
    std::optional<std::pair<double, double>> again;
    try {
      again = alternating_medians(o.confirm_rounds, [&](int k) {
        return tuning.more(timed[k == 0 ? 0 : c].algorithm, on_device, runs);
      });
    } catch (const DeviceContextError& e) {
      say(msg("[metaopt]   timing again failed: ", e.what(), "; the device context is lost, tuning stops"));
      throw;
    } catch (const std::exception& e) {  // keep the first pass's choice
      say(msg("[metaopt]   timing again failed: ", e.what(), "; the first timings decide"));
    }
    if (again) {
      const auto [m0, m1] = *again;
      const std::string why = timed[c].median <= o.confirm_margin * timed[0].median
                                  ? std::string("close call")
                                  : msg(timed[c].algorithm->name(), " ran once in ", seconds_text(timed[c].fastest));
      say(msg("[metaopt]   ", why, ", timed again in ", o.confirm_rounds, " alternating rounds: ",
              timed[0].algorithm->name(), " ", seconds_text(m0), ", ", timed[c].algorithm->name(), " ",
              seconds_text(m1), m1 < m0 ? " (the order changed)" : ""));
      timed[0].median = m0;
      timed[c].median = m1;
      if (m1 < m0) std::swap(timed[0], timed[c]);
    }
  }
  out.winner = timed[0].algorithm;
  out.seconds = timed[0].median;
  out.why = msg("timing: ", seconds_text(out.seconds), ", fastest of ", out.timed, " timed");
  say(msg("[metaopt]   = ", out.winner->name(), " (", seconds_text(out.seconds), ", fastest of ", out.timed, ")"));
  if (o.cache) o.cache->put(key, TuningEntry{out.winner->name(), out.winner->version(), out.seconds});
  return out;
}

// ---- the conv_meta rewrite -----------------------------------------------------------

namespace {

TuningCache& state_cache(RewriteContext& ctx) {
  OptimizeState& st = *ctx.state;
  if (!st.cache_opened) {
    const Mode& mode = ctx.mode;
    st.cache = std::make_unique<TuningCache>(TuningCache::path_for(mode.metaopt_cache),
                                             [&mode](const std::string& w) { log_line(mode, "convgraph: warning: " + w); });
    st.cache->load();
    st.cache_opened = true;
  }
  return *st.cache;
}

ConvImplOp::Options impl_options(const Mode& mode, const std::string& label) {
  ConvImplOp::Options o;
  o.debug_check = mode.debug;
  o.workspace_limit = mode.workspace_limit;
  o.node_label = label;
  return o;
}

/// The tuning options of `mode` for one device; `own_pool` holds a pool of mode.threads
/// workers when that differs from the default pool's size.
TuneOptions tune_options(const Mode& mode, DeviceKind device, std::unique_ptr<ThreadPool>& own_pool) {
  TuneOptions o;
  o.budget_seconds = mode.metaopt_budget;
  o.verbose = mode.metaopt_verbose;
  o.log = [&mode](const std::string& line) { log_line(mode, line); };
  const int threads = mode.threads > 0 ? mode.threads : ThreadPool::default_pool().size();
  o.device = device_fingerprint(device, threads);
  if (mode.threads > 0 && mode.threads != ThreadPool::default_pool().size()) {
    own_pool = std::make_unique<ThreadPool>(mode.threads);
    o.pool = own_pool.get();
  }
  return o;
}

}  // namespace

namespace {

std::mutex g_agreement_mu;
TuningAgreement g_agreement;  // guarded by g_agreement_mu

// tune_conv here, or, under a tuning agreement, the choice it returns (rank 0's in a
// data-parallel job) as "<algorithm>\n<why>", looked up among this process's candidates.
// Used at compile time and for shapes tuned at run time: every rank reaches both alike.
TuneOutcome agreed_tuning(const ConvProblem& p, const ConvCandidates& c, const std::string& label,
                          const TuneOptions& o, const Mode& mode, std::vector<std::string>* notes) {
  TuneOutcome mine;
  const std::optional<std::string> theirs = rank0_choice([&] {
    mine = tune_conv(p, c, label, o);
    return mine.winner ? mine.winner->name() + "\n" + mine.why : std::string();
  });
  if (!theirs) return mine;
  const std::string& choice = *theirs;
  TuneOutcome r;
  const std::size_t nl = choice.find('\n');
  const std::string name = choice.substr(0, nl);
  if (name.empty()) return r;  // nothing timed there: priority lowering, as everywhere
  for (const auto& a : c.usable())
    if (a->name() == name) {
      r.winner = a;
      r.why = "chosen on rank 0: " + (nl == std::string::npos ? std::string() : choice.substr(nl + 1));
      return r;
    }
  const std::string line = msg("metaopt: ", label, ": rank 0 chose ", name,
                               ", which this process cannot run; priority lowering decides");
  log_line(mode, "convgraph: warning: " + line);
  if (notes) notes->push_back(line);
  return r;
}

}  // namespace

/// What the nodes tuned at run time share, for as long as their Function lives: the mode
/// and algorithms (copies: the caller's registry may be gone by then), and one tuning
/// cache, opened at the first tuning. One node tunes at a time.
struct RunTimeTuning {
  Mode mode;
  AlgorithmRegistry registry;
  std::mutex mu;
  std::unique_ptr<TuningCache> cache;

  explicit RunTimeTuning(const Mode& m) : mode(m), registry(mode_registry(m)) { mode.registry = &registry; }

  AlgorithmPtr tune(const AbstractConvOp& op, DeviceKind device, const std::string& label, const ConvProblem& p,
                    std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!cache) {
      cache = std::make_unique<TuningCache>(TuningCache::path_for(mode.metaopt_cache),
                                            [this](const std::string& w) { log_line(mode, "convgraph: warning: " + w); });
      cache->load();
    }
    if (mode.metaopt_verbose >= 1)
      log_line(mode, msg("[metaopt] ", label, ": a new shape at run time; tuning on it (later calls with it reuse the choice)"));
    std::unique_ptr<ThreadPool> own_pool;
    TuneOptions o = tune_options(mode, device, own_pool);
    o.clock = mode.metaopt_clock.get();
    o.cache = cache.get();
    try {
      const TuneOutcome r = agreed_tuning(p, meta_candidates(op, p, device, mode, registry), label, o, mode, nullptr);
      cache->save();
      if (!r.winner) return nullptr;
      why = "run time, " + r.why;
      return r.winner;
    } catch (const DeviceContextError&) {
      throw;  // no fallback on a dead context: every kernel would fail the same way
    } catch (const Error& e) {  // tuning only saves time: the first applicable candidate runs
      log_line(mode, msg("convgraph: warning: ", label, ": run-time tuning failed (", e.what(), "); using priority order"));
      return nullptr;
    }
  }
};

namespace {

std::optional<Var> meta_optimize_conv(const Var& v, RewriteContext& ctx) {
  const auto* op = as_abstract_conv(v);
  if (!op || ctx.state == nullptr) return std::nullopt;
  const Mode& mode = ctx.mode;
  const std::string label = conv_node_label(v);
  auto abstract = std::dynamic_pointer_cast<const AbstractConvOp>(v.node()->op);
  std::vector<TensorType> types;
  bool known = v.type().fully_known();
  for (const auto& i : v.inputs()) {
    types.push_back(i.type());
    known = known && i.type().fully_known() && numel(i.type().shape) > 0;  // zero-size: run time
  }
  const auto& reg = mode_registry(mode);
  const DeviceKind device = v.type().device;
  if (!known) {
    // As cudnn.benchmark: time the candidates on the first call with each new shape. The
    // priority order stays the fallback when nothing can be timed.
    const auto fallback = conv_candidates(*op, nullptr, device, mode, reg).usable();
    if (fallback.empty()) return std::nullopt;  // priority lowering's final check explains
    std::vector<std::string> ts;
    for (const auto& t : types) ts.push_back(t.to_string());
    const std::string line = msg("[metaopt] ", label, ": shapes not fully known (", join_text(ts),
                                 "); tuned at run time on the first call with each new shape");
    if (mode.metaopt_verbose >= 1) log_line(mode, line);
    ctx.stats.notes.push_back(line);
    auto& state = ctx.state->run_time_tuning;  // one per compile(), shared by its nodes
    if (!state) state = std::make_shared<RunTimeTuning>(mode);
    ConvImplOp::Options options = impl_options(mode, label);
    options.tune = [state, abstract, device, label](const ConvProblem& p, std::string& why) {
      return state->tune(*abstract, device, label, p, why);
    };
    auto impl = std::make_shared<ConvImplOp>(abstract, fallback, "conv_meta: shapes unknown at compile time", options);
    return convgraph::apply(impl, v.inputs(), v.name());
  }
  ConvProblem p = op->problem(types);
  p.workspace_limit = mode.workspace_limit;
  const ConvCandidates c = meta_candidates(*op, p, device, mode, reg);

  std::unique_ptr<ThreadPool> own_pool;
  TuneOptions o = tune_options(mode, device, own_pool);
  o.clock = ctx.state->clock.get();
  o.cache = &state_cache(ctx);
  const TuneOutcome r = agreed_tuning(p, c, label, o, ctx.mode, &ctx.stats.notes);
  if (!r.winner) {
    ctx.stats.notes.push_back(msg("metaopt: ", label, ": nothing timed; priority lowering decides"));
    return std::nullopt;
  }
  const ConvImplOp::Options options = impl_options(mode, label);
  ctx.stats.notes.push_back(msg("metaopt: ", label, " -> ", r.winner->name(), " (", r.why, ")"));
  return convgraph::apply(std::make_shared<ConvImplOp>(abstract, r.winner, r.why, options), v.inputs(), v.name());
}

}  // namespace

void set_tuning_agreement(TuningAgreement agreement) {
  std::lock_guard<std::mutex> lock(g_agreement_mu);
  g_agreement = std::move(agreement);
}

TuningAgreement tuning_agreement() {
  std::lock_guard<std::mutex> lock(g_agreement_mu);
  return g_agreement;
}

std::optional<std::string> rank0_choice(const std::function<std::string()>& decide) {
  const TuningAgreement agree = tuning_agreement();
  if (!agree) {
    (void)decide();
    return std::nullopt;
  }
  bool decided_here = false;
  std::string choice = agree([&] {
    decided_here = true;
    return decide();
  });
  if (decided_here) return std::nullopt;
  return choice;
}

void register_meta_optimizer(RewriteDB& db) {
  // Opt-in (tag conv_meta only), tried before priority lowering like Theano's conv_metaopt;
  // nodes it cannot time are left for priority lowering.
  db.add_local("conv_lowering", "meta_optimize_conv", {"conv_meta"}, 0, meta_optimize_conv);
}

}  // namespace convgraph
