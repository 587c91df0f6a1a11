// Exporting the tuning cache and importing it on a machine with the same fingerprint;
// another machine's file is refused naming both fingerprints; bad files are errors.
#include <catch2/catch.hpp>

#include "cache_setup.hpp"
#include "fakes.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

namespace {
std::string key(const std::string& device, const std::string& problem) {
  return device + "\t" + problem + "\tfake.slow@1,fake.fast@1";
}
}  // namespace

TEST_CASE("tuning export: this machine's entries go out and come back into another cache", "[optimizer][tuning_export]") {
  TempPath from("from.txt"), out("export.txt"), to("to.txt");
  const std::string here2 = device_fingerprint(DeviceKind::cpu, 2), here1 = device_fingerprint(DeviceKind::cpu, 1);
  {
    TuningCache c(from.path);
    c.put(key(here2, "fwd 2d a"), TuningEntry{"fake.fast", 1, 0.001});
    c.put(key(here1, "fwd 2d b"), TuningEntry{"fake.slow", 1, 0.002});
    c.put(key("cpu Some Other CPU threads=2", "fwd 2d c"), TuningEntry{"fake.fast", 1, 0.003});  // a shared cache
    c.save();
  }
  CHECK(export_tuning(out.path, from.path) == 2);  // not the other machine's entry
  CHECK_THAT(slurp(out.path), Contains("convgraph-tuning-cache v1") && !Contains("Some Other CPU"));

  CHECK(import_tuning(out.path, to.path) == 2);
  TuningCache imported(to.path);
  imported.load();
  REQUIRE(imported.find(key(here2, "fwd 2d a")) != nullptr);
  CHECK(*imported.find(key(here2, "fwd 2d a")) == (TuningEntry{"fake.fast", 1, 0.001}));
  CHECK(imported.find(key(here1, "fwd 2d b")) != nullptr);
  CHECK(imported.size() == 2);
  CHECK(import_tuning(out.path, to.path) == 2);  // again: merged, no duplicates
  imported.load();
  CHECK(imported.size() == 2);

  // An exported choice is used without timing: the meta-optimizer finds it in the cache.
  Setup s;
  Var x = input(DType::float32, {2, 3, 8, 8}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var y = conv2d(x, w, {.name = "c1"});
  optimized({x, w}, {y}, s.mode(from.path));  // tunes into `from`
  CHECK(s.log.size() > 0);
  CHECK(export_tuning(out.path, from.path) == 3);
  CHECK(import_tuning(out.path, to.path) == 3);
  Setup fresh;
  optimized({x, w}, {y}, fresh.mode(to.path));
  CHECK(fresh.slow->runs == 0);
  CHECK(fresh.fast->runs == 0);
  CHECK_THAT(fresh.text(), Contains("cache hit -> fake.fast"));
}

TEST_CASE("tuning import: another machine's file is refused naming both fingerprints", "[optimizer][tuning_export]") {
  TempPath theirs("theirs.txt"), mine("mine.txt");
  TuningCache::Entries e;
  e.emplace(key("cpu AMD EPYC 7B13 64-Core Processor threads=8", "fwd 2d a"), TuningEntry{"fake.fast", 1, 0.001});
  spit(theirs.path, TuningCache::serialize(e));
  const std::string here = device_fingerprint(DeviceKind::cpu, 1);
  const std::string model = here.substr(0, here.rfind(" threads="));
  CHECK_THROWS_AS(import_tuning(theirs.path, mine.path), ValueError);
  CHECK_THROWS_WITH(import_tuning(theirs.path, mine.path),
                    Contains("another machine") && Contains("'cpu AMD EPYC 7B13 64-Core Processor'") && Contains("'" + model + "'"));
  TuningCache untouched(mine.path);
  untouched.load();
  CHECK(untouched.size() == 0);

  spit(theirs.path, "convgraph-tuning-cache v1\nnot\ta\tvalid line\n");
  CHECK_THROWS_WITH(import_tuning(theirs.path, mine.path), Contains("import_tuning") && Contains("line 2"));
  spit(theirs.path, "{\"json\": true}\n");
  CHECK_THROWS_WITH(import_tuning(theirs.path, mine.path), Contains("not a convgraph tuning cache"));
  CHECK_THROWS_WITH(import_tuning(theirs.path + ".missing", mine.path), Contains("does not exist"));
  CHECK_THROWS_WITH(export_tuning("/nonexistent/dir/x.txt", mine.path), Contains("cannot write"));
}
