// The rewrite database: registration, tag queries and the phase / fixed-point driver.
#include "convgraph/optimizer/rewrite_db.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <unordered_set>

#include "convgraph/core/error.hpp"
#include "convgraph/core/function_graph.hpp"
#include "convgraph/optimizer/compile_stats.hpp"
#include "optimizer/text_util.hpp"

namespace convgraph {

namespace {

bool has(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool has_tag(const std::vector<std::string>& tags, std::string_view name, std::string_view t) {
  return has(tags, t) || (!name.empty() && name == t);
}

std::vector<std::string> merged(std::vector<std::string> a, const std::vector<std::string>& b) {
  for (const auto& t : b)
    if (!has(a, t)) a.push_back(t);
  return a;
}

}  // namespace

// ---- TagQuery ---------------------------------------------------------------------

TagQuery TagQuery::parse(std::string_view text) {
  TagQuery q;
  for (const auto& raw : split_text(text, ':')) {
    const std::string item = trim_text(raw);
    if (item.empty()) continue;
    const char c = item[0];
    const std::string tag = (c == '+' || c == '-' || c == '&') ? item.substr(1) : item;
    if (tag.empty()) throw FlagError(msg("tag query '", text, "': '", item, "' names no tag"));
    if (c == '-') q.exclude.push_back(tag);
    else if (c == '&') q.require.push_back(tag);
    else q.include.push_back(tag);
  }
  return q;
}

bool TagQuery::accepts(const std::vector<std::string>& tags, std::string_view name) const {
  return reject_reason(tags, name).empty();
}

std::string TagQuery::reject_reason(const std::vector<std::string>& tags, std::string_view name) const {
  for (const auto& t : exclude)
    if (has_tag(tags, name, t)) return msg("excluded by optimizer_excluding=", t);
  for (const auto& t : require)
    if (!has_tag(tags, name, t)) return msg("lacks the required tag ", t, " (optimizer_requiring=", t, ")");
  for (const auto& t : include)
    if (has_tag(tags, name, t)) return {};
  return msg("not enabled: its tags (", join_text(tags), ") include none of ", join_text(include),
             tags.empty() ? "" : msg(" (add optimizer_including=", tags.front(), ")"));
}

TagQuery TagQuery::including(const std::vector<std::string>& tags) const {
  TagQuery q = *this;
  q.include = merged(q.include, tags);
  return q;
}
TagQuery TagQuery::excluding(const std::vector<std::string>& tags) const {
  TagQuery q = *this;
  q.exclude = merged(q.exclude, tags);
  return q;
}
TagQuery TagQuery::requiring(const std::vector<std::string>& tags) const {
  TagQuery q = *this;
  q.require = merged(q.require, tags);
  return q;
}

std::string TagQuery::to_string() const {
  std::vector<std::string> parts;
  for (const auto& t : include) parts.push_back("+" + t);
  for (const auto& t : exclude) parts.push_back("-" + t);
  for (const auto& t : require) parts.push_back("&" + t);
  return join_text(parts, ":");
}

// ---- registration -------------------------------------------------------------------

void RewriteDB::check_name(const std::string& name, const std::vector<std::string>& tags) const {
  if (name.empty()) throw ValueError("RewriteDB: a phase or rewrite needs a name");
  for (const auto& p : phases_) {
    if (p.name == name) throw ValueError(msg("RewriteDB: the name '", name, "' is already a phase"));
    if (has(p.tags, name)) throw ValueError(msg("RewriteDB: the name '", name, "' is already a tag of phase ", p.name));
    if (has(tags, p.name)) throw ValueError(msg("RewriteDB: tag '", p.name, "' of '", name, "' is a phase name"));
  }
  for (const auto& e : entries_) {
    if (e.name == name) throw ValueError(msg("RewriteDB: the rewrite '", name, "' is already registered"));
    if (has(e.tags, name)) throw ValueError(msg("RewriteDB: the name '", name, "' is already a tag of rewrite ", e.name));
    if (has(tags, e.name)) throw ValueError(msg("RewriteDB: tag '", e.name, "' of '", name, "' is a rewrite name"));
  }
}

void RewriteDB::add_phase(std::string name, double position, std::vector<std::string> tags) {
  check_name(name, tags);
  phases_.push_back(RewritePhase{std::move(name), std::move(tags), position});
  std::stable_sort(phases_.begin(), phases_.end(),
                   [](const RewritePhase& a, const RewritePhase& b) { return a.position < b.position; });
}

void RewriteDB::add(RewriteEntry e) {
  check_name(e.name, e.tags);
  bool found = false;
  for (const auto& p : phases_) found = found || p.name == e.phase;
  if (!found) throw ValueError(msg("RewriteDB: rewrite '", e.name, "' names the unknown phase '", e.phase, "'"));
  entries_.push_back(std::move(e));
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const RewriteEntry& a, const RewriteEntry& b) { return a.position < b.position; });
}

void RewriteDB::add_local(std::string phase, std::string name, std::vector<std::string> tags,
                          double position, LocalRewrite fn) {
  if (!fn) throw ValueError(msg("RewriteDB: local rewrite '", name, "' has no function"));
  add(RewriteEntry{std::move(name), std::move(phase), std::move(tags), position, std::move(fn), {}});
}

void RewriteDB::add_global(std::string phase, std::string name, std::vector<std::string> tags,
                           double position, GlobalRewrite fn) {
  if (!fn) throw ValueError(msg("RewriteDB: global rewrite '", name, "' has no function"));
  add(RewriteEntry{std::move(name), std::move(phase), std::move(tags), position, {}, std::move(fn)});
}

// ---- queries --------------------------------------------------------------------------

std::vector<const RewritePhase*> RewriteDB::phases() const {
  std::vector<const RewritePhase*> out;
  for (const auto& p : phases_) out.push_back(&p);
  return out;
}

std::vector<const RewritePhase*> RewriteDB::query_phases(const TagQuery& q) const {
  std::vector<const RewritePhase*> out;
  for (const auto& p : phases_)
    if (q.accepts(p.tags, p.name)) out.push_back(&p);
  return out;
}

std::vector<const RewriteEntry*> RewriteDB::query(const TagQuery& q, std::string_view phase) const {
  std::vector<const RewriteEntry*> out;
  for (const auto& e : entries_)
    if (e.phase == phase && q.accepts(e.tags, e.name)) out.push_back(&e);
  return out;
}

std::vector<std::string> RewriteDB::vocabulary() const {
  std::vector<std::string> v;
  auto add_word = [&](const std::string& w) {
    if (!has(v, w)) v.push_back(w);
  };
  for (const auto& p : phases_) {
    add_word(p.name);
    for (const auto& t : p.tags) add_word(t);
  }
  for (const auto& e : entries_) {
    add_word(e.name);
    for (const auto& t : e.tags) add_word(t);
  }
  return v;
}

std::string RewriteDB::summary() const {
  std::ostringstream os;
  for (const auto& p : phases_) {
    os << "phase " << p.name << " @" << p.position << " [" << join_text(p.tags) << "]\n";
    for (const auto& e : entries_)
      if (e.phase == p.name)
        os << "  " << (e.local ? "local  " : "global ") << e.name << " @" << e.position << " ["
           << join_text(e.tags) << "]\n";
  }
  return os.str();
}

// ---- driver -------------------------------------------------------------------------

int RewriteDB::run_phase(const RewritePhase& phase, const TagQuery& q, RewriteContext& ctx) const {
  const auto selected = query(q, phase.name);
  std::vector<const RewriteEntry*> locals;
  for (const auto* e : selected) {
    if (e->global) {
      ctx.current = e->name;
      e->global(ctx);
    } else {
      locals.push_back(e);
    }
  }
  if (locals.empty()) return 0;

  int total = 0;
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    int changed = 0;
    const std::vector<Var> order = ctx.graph.toposort();
    // Nodes that a replacement cut off from the outputs are skipped for the rest of the
    // sweep: rewriting dead code wastes time and would confuse statistics.
    std::unordered_set<const Node*> live;
    for (const auto& v : order) live.insert(v.node());
    for (const auto& v : order) {
      if (v.op() == nullptr || !live.count(v.node())) continue;
      for (const auto* e : locals) {
        ctx.current = e->name;
        std::optional<Var> rep = e->local(v, ctx);
        if (!rep || !rep->defined() || rep->same(v)) continue;
        ctx.graph.replace(v, *rep, e->name);
        ++changed;
        live.clear();
        for (const auto& w : ctx.graph.toposort()) live.insert(w.node());
        break;
      }
    }
    total += changed;
    if (changed == 0) return total;
  }
  ctx.stats.notes.push_back(msg("optimizer: phase ", phase.name, " reached no fixed point after ",
                                kMaxSweeps, " sweeps (", total, " replacements); continuing"));
  return total;
}

void RewriteDB::run(const TagQuery& q, RewriteContext& ctx) const {
  for (const auto* phase : query_phases(q)) {
    const auto t0 = std::chrono::steady_clock::now();
    run_phase(*phase, q, ctx);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ctx.stats.pass_seconds.emplace_back(phase->name, s);
  }
}

}  // namespace convgraph
