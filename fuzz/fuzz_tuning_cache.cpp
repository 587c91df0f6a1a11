// Fuzz target: the tuning-cache reader (optimizer/tuning_cache.cpp). Arbitrary bytes are
// either a valid cache or rejected with a reason, never a crash. A valid one serialises to
// a file that parses back to the same entries (times to serialize()'s 9 digits), and
// TuningCache::load() of the same bytes on disk agrees with parse().
//
// Input: the file's bytes, as they are.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "convgraph/optimizer/meta_optimizer.hpp"
#include "fuzz/fuzz_input.hpp"

using namespace convgraph;

namespace {

/// A file of this process's own in the temporary folder, removed at exit.
const std::string& scratch_path() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() /
                   ("convgraph-fuzz-tuning-" + std::to_string(::getpid()) + ".txt");
    std::atexit([] { std::remove(scratch_path().c_str()); });
    return p.string();
  }();
  return path;
}

bool same_entries(const TuningCache::Entries& a, const TuningCache::Entries& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.version != ib->second.version) return false;
    const double s = ia->second.seconds, t = ib->second.seconds;
    if (!(std::abs(s - t) <= 1e-8 * std::abs(s))) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  TuningCache::Entries entries;
  std::string error;
  const bool ok = TuningCache::parse(text, entries, error);
  FUZZ_CHECK(ok || !error.empty(), "parse() failed without saying why");

  if (ok) {
    // Algorithm names may hold characters serialize() replaces, so compare after one
    // round: serialize(parse(serialize(e))) == serialize(e), and the keys survive.
    const std::string once = TuningCache::serialize(entries);
    TuningCache::Entries back;
    std::string why;
    FUZZ_CHECK(TuningCache::parse(once, back, why), "serialize() output does not parse: ", why, "\n", once);
    FUZZ_CHECK(same_entries(entries, back), "entries changed through serialize/parse:\n", once);
    FUZZ_CHECK(TuningCache::serialize(back) == once, "serialize() is not stable:\n", once);
  }

  // The same bytes as a file on disk: load() agrees with parse() and warns when it ignores it.
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  int warnings = 0;
  TuningCache cache(scratch_path(), [&](const std::string&) { ++warnings; });
  cache.load();
  if (ok) {
    FUZZ_CHECK(cache.load_error().empty() && warnings == 0, "load() rejected a file parse() accepts: ",
               cache.load_error());
    FUZZ_CHECK(cache.size() == entries.size(), "load() read ", cache.size(), " entries, parse() ", entries.size());
    for (const auto& [key, e] : entries) {
      const TuningEntry* found = cache.find(key);
      FUZZ_CHECK(found && *found == e, "load() lost or changed the entry for key '", key, "'");
    }
  } else {
    FUZZ_CHECK(!cache.load_error().empty() && warnings == 1 && cache.size() == 0,
               "load() accepted a file parse() rejects (", error, ")");
  }
  return 0;
}
