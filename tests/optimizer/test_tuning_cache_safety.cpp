// The tuning cache and what may be at its path: only regular files that are convgraph
// caches are read and replaced; a directory, FIFO, device, oversized or foreign file is
// refused with a warning and left alone (compilation goes on, tuning is not persisted).
// CRLF files read. Several processes compiling into one cache, and writers killed with
// SIGKILL mid-write, leave a cache the next compile reads and no stale temporaries.
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <thread>

#include "cache_setup.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

/// Fails the test (SIGALRM ends the process) instead of hanging forever on a regression
/// such as blocking on a FIFO.
struct Deadline {
  explicit Deadline(unsigned seconds) { ::alarm(seconds); }
  ~Deadline() { ::alarm(0); }
};

/// Compiles the two-conv net into `cache`; checks it still tunes (nothing trusted), warns
/// "refused" naming the path and `what`, and that the path was left exactly as it was.
void expect_refused(const std::string& cache, const std::string& what) {
  Setup s;
  Deadline guard(60);
  struct stat before {};
  REQUIRE(::lstat(cache.c_str(), &before) == 0);
  CHECK(compile_net(s.mode(cache)) == std::vector<std::string>{"fake.fast", "fake.fast"});
  CHECK(s.runs() > 0);
  CHECK_THAT(s.text(), Contains("warning: tuning cache " + cache + " refused") && Contains(what) &&
                           Contains("left alone"));
  struct stat after {};
  REQUIRE(::lstat(cache.c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);
  CHECK((after.st_mode & S_IFMT) == (before.st_mode & S_IFMT));
  CHECK(after.st_size == before.st_size);
  CHECK_FALSE(fs::exists(cache + ".lock"));  // no lock file is created next to it either
}

/// The same host tag the cache puts in its temporary names.
std::string host_tag() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !*host) return "localhost";
  std::string h = host;
  for (auto& c : h)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
  return h;
}

std::vector<std::string> temporaries(const std::string& cache) {
  std::vector<std::string> names;
  const std::string prefix = fs::path(cache).filename().string() + ".tmp.";
  for (const auto& e : fs::directory_iterator(fs::path(cache).parent_path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) names.push_back(e.path().filename().string());
  return names;
}

void make_old(const std::string& path, int seconds) {
  struct timeval tv[2];
  ::gettimeofday(&tv[0], nullptr);
  tv[0].tv_sec -= seconds;
  tv[1] = tv[0];
  REQUIRE(::utimes(path.c_str(), tv) == 0);
}

/// A pid that existed and no longer does.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("tuning cache safety: a directory at the path is refused, not called empty", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  fs::create_directories(tmp.path);
  expect_refused(tmp.path, "is a directory");
  CHECK(fs::is_empty(tmp.path));
}

TEST_CASE("tuning cache safety: a FIFO at the path is refused without blocking", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  REQUIRE(::mkfifo(tmp.path.c_str(), 0644) == 0);
  expect_refused(tmp.path, "is a FIFO (named pipe)");
}

TEST_CASE("tuning cache safety: device nodes are neither read nor replaced", "[optimizer][cache]") {
  // Our own nodes in a temporary folder when we may create them (root), else the real
  // ones, which an unprivileged process could not replace anyway.
  for (const auto& [name, minor] : {std::pair<std::string, int>{"null", 3}, {"zero", 5}}) {
    DYNAMIC_SECTION(name) {
      TempPath tmp(name);
      std::string path = tmp.path;
      if (::mknod(path.c_str(), S_IFCHR | 0666, ::makedev(1, static_cast<unsigned>(minor))) != 0) path = "/dev/" + name;
      expect_refused(path, "is a character device");
      struct stat st {};
      REQUIRE(::stat(path.c_str(), &st) == 0);
      CHECK(S_ISCHR(st.st_mode));
    }
  }
}

TEST_CASE("tuning cache safety: a foreign file is refused and kept byte for byte", "[optimizer][cache]") {
  for (const std::string& text : {std::string("my notes\nnot a cache\n"), std::string("\x7f" "ELF\x02\x01\x01 junk\n"),
                                 std::string("convgraph-other-thing v1\nend 0\n")}) {
    TempPath tmp("tuning.txt");
    spit(tmp.path, text);
    expect_refused(tmp.path, "is not a convgraph tuning cache");
    CHECK(slurp(tmp.path) == text);
  }
}

TEST_CASE("tuning cache safety: an oversized file is refused after a bounded read", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  {
    std::ofstream out(tmp.path, std::ios::binary);
    out << "convgraph-tuning-cache v1\n";
    const std::string line(1023, 'x');
    for (std::size_t n = 0; n <= TuningCache::kMaxBytes; n += 1024) out << line << '\n';
  }
  expect_refused(tmp.path, "more than the 8 MiB");
}

TEST_CASE("tuning cache safety: a symbolic link is followed and kept", "[optimizer][cache]") {
  TempPath tmp("real.txt");
  const std::string link = (fs::path(tmp.path).parent_path() / "link.txt").string();
  spit(tmp.path, "");  // empty: a cache with nothing to lose
  fs::create_symlink(tmp.path, link);
  Setup s;
  compile_net(s.mode(link));
  CHECK(fs::is_symlink(link));
  CHECK(parsed_file(tmp.path).size() == 2);
  CHECK(temporaries(link).empty());
  const int first = s.runs();
  compile_net(s.mode(link));
  CHECK(s.runs() == first);
  // A dangling link is refused (its target cannot be checked) and stays dangling.
  fs::remove(tmp.path);
  s.log.clear();
  compile_net(s.mode(link));
  CHECK_THAT(s.text(), Contains("refused") && Contains("symbolic link"));
  CHECK(fs::is_symlink(link));
  CHECK_FALSE(fs::exists(tmp.path));
}

TEST_CASE("tuning cache safety: CRLF line endings are read", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  Setup s;
  compile_net(s.mode(tmp.path));
  std::string crlf;
  for (char c : slurp(tmp.path)) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  spit(tmp.path, crlf);
  TuningCache::Entries e;
  std::string err;
  CHECK(TuningCache::parse(crlf, e, err));
  CHECK(e.size() == 2);
  s.log.clear();
  const int before = s.runs();
  compile_net(s.mode(tmp.path));
  CHECK(s.runs() == before);
  CHECK_THAT(s.text(), Contains("cache hit") && !Contains("warning"));
}

TEST_CASE("tuning cache safety: a writer removes the temporaries of killed writers only", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  const std::string dir = fs::path(tmp.path).parent_path().string() + "/";
  const std::string host = host_tag();
  const std::string dead = dir + "tuning.txt.tmp." + host + "." + std::to_string(dead_pid()) + ".aB3dE9";
  const std::string live = dir + "tuning.txt.tmp." + host + "." + std::to_string(::getppid()) + ".Zx81Qa";
  const std::string live_old = dir + "tuning.txt.tmp." + host + "." + std::to_string(::getppid()) + ".Kk0001";
  const std::string remote = dir + "tuning.txt.tmp.some-other-host.12345.Qq1234";
  const std::string remote_old = dir + "tuning.txt.tmp.some-other-host.12345.Qq9999";
  const std::string legacy_old = dir + "tuning.txt.tmp.Ab12Cd";  // earlier naming, no pid
  const std::string other_cache = dir + "other.txt.tmp." + host + "." + std::to_string(dead_pid()) + ".aaaaaa";
  for (const auto& p : {dead, live, live_old, remote, remote_old, legacy_old, other_cache}) spit(p, "partial");
  for (const auto& p : {live_old, remote_old, legacy_old}) make_old(p, 2 * TuningCache::kStaleTempSeconds);
  write_entries(tmp.path, "w", 1);
  CHECK_FALSE(fs::exists(dead));        // this host, writer gone
  CHECK(fs::exists(live));              // this host, writer alive and recent: not ours to judge
  CHECK_FALSE(fs::exists(live_old));    // ... unless it is old
  CHECK(fs::exists(remote));            // another host, recent
  CHECK_FALSE(fs::exists(remote_old));  // another host, old
  CHECK_FALSE(fs::exists(legacy_old));
  CHECK(fs::exists(other_cache));       // another cache's business
  CHECK(parsed_file(tmp.path).size() == 1);
}

TEST_CASE("tuning cache safety: writers killed with SIGKILL mid-write leave a readable cache", "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  // A large cache makes each save spend most of its time writing and syncing the
  // temporary, so the kills land mid-write most of the time.
  {
    TuningCache c(tmp.path, [](const std::string&) {});
    for (int i = 0; i < 3000; ++i)
      c.put("base" + std::to_string(i) + "\tfwd nd2 g1 mb2 some longer problem key\tcand@1",
            TuningEntry{"algo.base", 1, 1e-3});
    c.save();
  }
  int leftovers_seen = 0;
  for (int round = 0; round < 6; ++round) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(ready[0]);
      for (int i = 0;; ++i) {
        TuningCache c(tmp.path, [](const std::string&) {});
        c.load();
        c.put("k" + std::to_string(round) + "." + std::to_string(i) + "\tp\tc", TuningEntry{"algo.kill", 1, 0.5});
        c.save();
        if (i == 0) {
          const char one = 1;
          (void)!::write(ready[1], &one, 1);
        }
      }
    }
    ::close(ready[1]);
    char one = 0;
    REQUIRE(::read(ready[0], &one, 1) == 1);  // it has saved once: it is in its loop
    ::close(ready[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 13 * round));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    leftovers_seen += temporaries(tmp.path).empty() ? 0 : 1;
    // Whatever the moment of the kill, the cache parses and holds everything saved so far.
    const auto entries = parsed_file(tmp.path);
    CHECK(entries.size() >= 3001 + static_cast<std::size_t>(round));
    CHECK(entries.count("k" + std::to_string(round) + ".0\tp\tc") == 1);
    // The next writer (not blocked by the dead one's lock) removes its temporary.
    write_entries(tmp.path, "after" + std::to_string(round) + ".", 1);
    CHECK(temporaries(tmp.path).empty());
  }
  INFO("rounds that left a temporary behind: " << leftovers_seen);
  SUCCEED();
  // The next compile reads it (no warning).
  Setup s;
  compile_net(s.mode(tmp.path));
  CHECK_THAT(s.text(), !Contains("warning"));
}

TEST_CASE("tuning cache safety: processes compiling into one cache at once leave one the next compile reads",
          "[optimizer][cache]") {
  TempPath tmp("tuning.txt");
  const std::vector<std::vector<std::int64_t>> shapes{{1, 3, 8, 8}, {2, 3, 9, 9}, {3, 3, 10, 10}, {4, 3, 7, 7}};
  std::vector<pid_t> kids;
  for (const auto& shape : shapes) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 0;
      try {
        for (int repeat = 0; repeat < 5; ++repeat) {  // each compile saves its own two entries
          Setup s;
          std::vector<std::int64_t> x = shape;
          x[2] += repeat * 4;
          if (compile_net(s.mode(tmp.path, ",threads=1"), x) != std::vector<std::string>{"fake.fast", "fake.fast"})
            code = 2;
          if (s.text().find("warning") != std::string::npos) code = 3;
        }
      } catch (...) {
        code = 4;
      }
      ::_exit(code);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(parsed_file(tmp.path).size() == 2 * 5 * shapes.size());
  CHECK(temporaries(tmp.path).empty());
  // Every process's results are there: the next compiles time nothing.
  Setup s;
  for (const auto& shape : shapes)
    for (int repeat = 0; repeat < 5; ++repeat) {
      std::vector<std::int64_t> x = shape;
      x[2] += repeat * 4;
      compile_net(s.mode(tmp.path, ",threads=1"), x);
    }
  CHECK(s.runs() == 0);
  CHECK_THAT(s.text(), !Contains("warning"));
}
