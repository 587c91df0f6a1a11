// Fuzz target: the flag language (optimizer/mode.cpp). Arbitrary text must parse into a
// Mode or throw a convgraph::Error; a parsed Mode's to_string() must parse back to the
// same settings, and printing is stable from then on.
//
// Input: byte 0 picks the entry point (from_flags on fast_run / debug_mode, with_flags,
// including/excluding/requiring, from_env via CONVGRAPH_FLAGS); the rest is the text.
#include <cmath>
#include <cstdlib>

#include "convgraph/optimizer/mode.hpp"
#include "fuzz/fuzz_input.hpp"

using namespace convgraph;

namespace {

bool same_settings(const Mode& a, const Mode& b) {
  const bool budget_close = std::abs(a.metaopt_budget - b.metaopt_budget) <= 1e-5 * a.metaopt_budget;
  return a.optimizer == b.optimizer && a.include_tags == b.include_tags && a.exclude_tags == b.exclude_tags &&
         a.require_tags == b.require_tags && a.device == b.device && a.debug == b.debug &&
         a.profile == b.profile && a.metaopt_verbose == b.metaopt_verbose &&
         a.metaopt_include == b.metaopt_include && a.metaopt_exclude == b.metaopt_exclude &&
         a.metaopt_cache == b.metaopt_cache && budget_close && a.workspace_limit == b.workspace_limit &&
         a.threads == b.threads;
}

Mode parse(std::size_t entry, const std::string& text) {
  switch (entry) {
    case 0: return Mode::from_flags(text);
    case 1: return Mode::from_flags(text, Mode::debug_mode());
    case 2: return Mode::fast_compile().with_flags(text);
    case 3: return Mode::none().including(text);
    case 4: return Mode::fast_run().excluding(text);
    case 5: return Mode::fast_run().requiring(text);
    default: {
      ::setenv("CONVGRAPH_FLAGS", text.c_str(), 1);
      Mode m = Mode::from_env();
      ::unsetenv("CONVGRAPH_FLAGS");
      return m;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::size_t entry = in.choice(7);
  const std::string text = in.rest();
  Mode m;
  try {
    m = parse(entry, text);
  } catch (const Error&) {
    ::unsetenv("CONVGRAPH_FLAGS");
    return 0;  // rejected with a message: fine
  }
  // Accepted: the printed form is a valid flag string meaning the same settings.
  const std::string printed = m.to_string();
  Mode again;
  try {
    again = Mode::from_flags(printed);
  } catch (const Error& e) {
    FUZZ_CHECK(false, "to_string() of an accepted Mode does not parse: '", printed, "': ", e.what());
  }
  FUZZ_CHECK(same_settings(m, again), "'", printed, "' parses to different settings: '", again.to_string(), "'");
  const std::string twice = again.to_string();
  FUZZ_CHECK(Mode::from_flags(twice).to_string() == twice, "printing is not stable: '", twice, "'");
  return 0;
}
