// The persistent tuning cache (docs/TESTING.md C.12-13): hits, misses, key completeness, bad
// caches (corrupt, truncated, other version) ignored with a warning and rewritten, and
// concurrent writers (threads and processes) that never corrupt the file. What else may
// be at the path (FIFOs, devices, foreign files...) and killed writers:
// test_tuning_cache_safety.cpp.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

#include "cache_setup.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

TEST_CASE("tuning cache: the second compile does no timing and says it hit", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  Setup s;
  CHECK(compile_net(s.mode(tmp.path)) == std::vector<std::string>{"fake.fast", "fake.fast"});
  const int first = s.runs();
  CHECK(first > 0);
  const std::string file = slurp(tmp.path);
  CHECK_THAT(file, Contains("convgraph-tuning-cache v1") && Contains("fake.fast") && Contains("end 2"));
  s.log.clear();
  CHECK(compile_net(s.mode(tmp.path)) == std::vector<std::string>{"fake.fast", "fake.fast"});
  CHECK(s.runs() == first);
  CHECK_THAT(s.text(), Contains("cache hit -> fake.fast"));
  // The file is left as it was (nothing new to write).
  CHECK(slurp(tmp.path) == file);
  // A different shape misses and is added.
  compile_net(s.mode(tmp.path), {1, 3, 10, 10});
  CHECK(s.runs() > first);
  CHECK_THAT(slurp(tmp.path), Contains("end 4"));
}

TEST_CASE("tuning cache: lowered nodes say the choice came from the cache", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  Setup s;
  compile_net(s.mode(tmp.path));
  Var x = input(DType::float32, {2, 3, 8, 8}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  const auto g = optimized({x, w}, {conv2d(x, w)}, s.mode(tmp.path));
  CHECK_THAT(conv_impls(g)[0]->implementation(), Contains("fake.fast (cache hit") && Contains(tmp.path));
}

TEST_CASE("tuning cache: every key field matters", "[optimizer][cache]") {
  auto clock = std::make_shared<FakeClock>();
  std::vector<AlgorithmPtr> set{std::make_shared<FakeAlgorithm>("a", std::vector<std::string>{"x"}, 1, clock)};
  const std::string base = TuningCache::make_key("cpu X threads=2", problem(), set);
  CHECK(base == TuningCache::make_key("cpu X threads=2", problem(), set));
  CHECK(base != TuningCache::make_key("cpu X threads=4", problem(), set));
  CHECK(base != TuningCache::make_key("cuda NVIDIA H200 cudnn 90100", problem(), set));
  CHECK(base != TuningCache::make_key("cpu X threads=2", problem(DType::float64), set));
  ConvProblem limited = problem();
  limited.workspace_limit = 1 << 20;
  CHECK(base != TuningCache::make_key("cpu X threads=2", limited, set));
  ConvProblem strided = problem();
  strided.stride = {2, 2, 1};
  CHECK(base != TuningCache::make_key("cpu X threads=2", strided, set));
  ConvProblem computed = problem();
  computed.compute = DType::float64;
  CHECK(base != TuningCache::make_key("cpu X threads=2", computed, set));
  auto v2 = std::make_shared<FakeAlgorithm>("a", std::vector<std::string>{"x"}, 1, clock);
  v2->version_ = 2;
  CHECK(base != TuningCache::make_key("cpu X threads=2", problem(), {v2}));
  auto other = std::make_shared<FakeAlgorithm>("b", std::vector<std::string>{"x"}, 1, clock);
  CHECK(base != TuningCache::make_key("cpu X threads=2", problem(), {set[0], other}));
}

TEST_CASE("tuning cache: an algorithm version bump re-tunes", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  Setup s;
  compile_net(s.mode(tmp.path));
  const int first = s.runs();
  s.fast->version_ = 2;
  compile_net(s.mode(tmp.path));
  CHECK(s.runs() > first);
}

TEST_CASE("tuning cache: a stale entry naming an algorithm that is not a candidate is re-tuned", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  Setup s;
  compile_net(s.mode(tmp.path));
  std::string text = slurp(tmp.path);
  for (std::size_t pos; (pos = text.find("\tfake.fast\t")) != std::string::npos;) text.replace(pos, 11, "\tfake.gone\t");
  spit(tmp.path, text);
  s.log.clear();
  const int before = s.runs();
  CHECK(compile_net(s.mode(tmp.path)) == std::vector<std::string>{"fake.fast", "fake.fast"});
  CHECK(s.runs() > before);
  CHECK_THAT(s.text(), Contains("stale cache entry (fake.gone"));
  CHECK_THAT(slurp(tmp.path), !Contains("fake.gone"));
}

TEST_CASE("tuning cache: corrupt, truncated and other-version caches are ignored with a warning and rewritten", "[optimizer][cache]") {
  Setup s;
  TempPath good_tmp("good.txt");
  compile_net(s.mode(good_tmp.path));
  const std::string good = slurp(good_tmp.path);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"garbage line", good.substr(0, good.find('\n') + 1) + "this is not an entry\n" + good.substr(good.find('\n') + 1)},
      {"truncated", good.substr(0, good.size() - 7)},
      {"no end marker", good.substr(0, good.rfind("end "))},
      {"foreign version", "convgraph-tuning-cache v999\nend 0\n"},
      {"header cut short", "convgraph-tuning"},
      {"bad number", [&] {
         std::string t = good;
         t.replace(t.rfind('\t') + 1, 3, "x.y");
         return t;
       }()},
      {"empty", ""},
  };
  for (const auto& [what, text] : bad) {
    DYNAMIC_SECTION(what) {
      TempPath tmp("tuning.txt");
      spit(tmp.path, text);
      s.log.clear();
      const int before = s.runs();
      CHECK(compile_net(s.mode(tmp.path)) == std::vector<std::string>{"fake.fast", "fake.fast"});
      CHECK(s.runs() > before);  // nothing was trusted
      CHECK_THAT(s.text(), Contains("warning: tuning cache") && Contains("ignored") && Contains("rewritten"));
      // Rewritten as a valid cache, which the next compile uses.
      TuningCache::Entries entries;
      std::string error;
      CHECK(TuningCache::parse(slurp(tmp.path), entries, error));
      CHECK(entries.size() == 2);
      const int after = s.runs();
      compile_net(s.mode(tmp.path));
      CHECK(s.runs() == after);
    }
  }
}

TEST_CASE("tuning cache: parse rejects hostile lines with a reason", "[optimizer][cache]") {
  TuningCache::Entries e;
  std::string err;
  const std::string head = "convgraph-tuning-cache v1\n";
  CHECK(TuningCache::parse(head + "end 0\n", e, err));
  CHECK_FALSE(TuningCache::parse(head + "d\tp\tc\talgo\t1\t0.5\nend 2\n", e, err));
  CHECK_THAT(err, Contains("end marker"));
  CHECK_FALSE(TuningCache::parse(head + "d\tp\tc\talgo\t-1\t0.5\nend 1\n", e, err));
  CHECK_THAT(err, Contains("version"));
  CHECK_FALSE(TuningCache::parse(head + "d\tp\tc\talgo\t1\tinf\nend 1\n", e, err));
  CHECK_FALSE(TuningCache::parse(head + "d\tp\tc\talgo\t1\nend 1\n", e, err));
  CHECK_THAT(err, Contains("6 tab-separated fields"));
  CHECK_FALSE(TuningCache::parse(head + "d\tp\tc\ta\t1\t1\nd\tp\tc\tb\t1\t1\nend 2\n", e, err));
  CHECK_THAT(err, Contains("duplicate"));
  CHECK_FALSE(TuningCache::parse(head + "end 0\nextra\n", e, err));
  CHECK(TuningCache::parse(head + "d\tp\tc\talgo\t3\t0.25\nend 1\n", e, err));
  CHECK(e.begin()->second == TuningEntry{"algo", 3, 0.25});
  CHECK(TuningCache::parse(TuningCache::serialize(e), e, err));
}

TEST_CASE("tuning cache: default path follows XDG_CACHE_HOME, then HOME", "[optimizer][cache]") {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = xdg ? xdg : "";
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  CHECK(TuningCache::default_path() == "/tmp/xdg-test/convgraph/tuning.txt");
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME"))
    CHECK(TuningCache::default_path() == std::string(home) + "/.cache/convgraph/tuning.txt");
  if (xdg) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  CHECK(TuningCache::path_for("None").empty());
  CHECK(TuningCache::path_for("/x/y") == "/x/y");
  CHECK(TuningCache::path_for("") == TuningCache::default_path());
}

TEST_CASE("tuning cache: an unwritable location warns and compilation still succeeds", "[optimizer][cache]") {
  Setup s;
  TempPath tmp("file");
  spit(tmp.path, "x");
  const std::string impossible = tmp.path + "/sub/tuning.txt";  // a folder under a regular file
  CHECK(compile_net(s.mode(impossible)) == std::vector<std::string>{"fake.fast", "fake.fast"});
  CHECK_THAT(s.text(), Contains("not saved"));
}

TEST_CASE("tuning cache: concurrent writers (threads) never corrupt it and lose nothing", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  std::vector<std::thread> threads;
  const std::vector<std::string> tags{"t0", "t1", "t2", "t3"};
  for (const auto& tag : tags) threads.emplace_back(write_entries, tmp.path, tag, 25);
  for (auto& t : threads) t.join();
  TuningCache::Entries e;
  std::string err;
  REQUIRE(TuningCache::parse(slurp(tmp.path), e, err));
  CHECK(e.size() == 100);
}

TEST_CASE("tuning cache: concurrent writers (processes) never corrupt it and lose nothing", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  std::vector<pid_t> kids;
  for (int k = 0; k < 3; ++k) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      write_entries(tmp.path, std::string(1, static_cast<char>('p' + k)), 30);
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  // Meanwhile this process keeps reading: every read sees a complete, valid file.
  int reads = 0, valid = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string text = slurp(tmp.path);
    if (text.empty()) continue;  // not created yet
    ++reads;
    TuningCache::Entries e;
    std::string err;
    valid += TuningCache::parse(text, e, err) ? 1 : 0;
  }
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(valid == reads);
  TuningCache::Entries e;
  std::string err;
  REQUIRE(TuningCache::parse(slurp(tmp.path), e, err));
  CHECK(e.size() == 90);
}

TEST_CASE("tuning cache and flags: random and mutated input never crashes the parsers", "[optimizer][cache][fuzz]") {
  // A cheap stand-in for the libFuzzer targets of docs/TESTING.md A.4: mutate a valid file and
  // a valid flag string byte by byte; parsers must answer (false / FlagError), never crash.
  TuningCache::Entries e;
  e["cpu X threads=2\tfwd nd2 g1 mb2\tfake.a@1,fake.b@1"] = TuningEntry{"fake.a", 1, 0.5};
  e["cpu X threads=2\tfwd nd2 g1 mb4\tfake.a@1"] = TuningEntry{"fake.a", 1, 0.25};
  const std::string file = TuningCache::serialize(e);
  const std::string flags = "device=cpu,optimizer_including=conv_fft:conv_meta,metaopt.verbose=1,workspace_limit=64M";
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::size_t>(state >> 33);
  };
  const char alphabet[] = "\t\n ,:=.-+&0123456789abcdefghijklmnopqrstuvwxyzNT\x01\xff";
  int parsed = 0, rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string f = file, g = flags;
    for (int k = 0, n = 1 + static_cast<int>(next() % 4); k < n; ++k) {
      const std::size_t pos = next() % f.size();
      switch (next() % 3) {
        case 0: f[pos] = alphabet[next() % (sizeof alphabet - 1)]; break;
        case 1: f.erase(pos, 1 + next() % 8); break;
        default: f.insert(pos, 1, alphabet[next() % (sizeof alphabet - 1)]);
      }
      const std::size_t gpos = next() % g.size();
      g[gpos] = alphabet[next() % (sizeof alphabet - 1)];
    }
    TuningCache::Entries out;
    std::string err;
    if (TuningCache::parse(f, out, err)) ++parsed;
    else CHECK_FALSE(err.empty());
    try {
      (void)Mode::from_flags(g);
    } catch (const FlagError&) {
      ++rejected;
    }
  }
  CHECK(parsed + rejected > 0);
}
