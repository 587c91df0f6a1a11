// Every MPI call of convgraph: process set-up (init, finalize, rank, size), the tuning
// agreement, and the collectives of dist/comm.hpp, all on MPI_COMM_WORLD with errors
// returned (MPI_ERRORS_RETURN) and raised as RuntimeError. Without MPI the same functions
// raise RuntimeError saying that the library was built without it.
#include "dist/comm.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include "convgraph/dist/mpi.hpp"
#include "convgraph/optimizer/tuning_agreement.hpp"

#if CONVGRAPH_WITH_MPI
#include <mpi.h>
#endif

namespace convgraph::dist {

bool mpi_built() { return CONVGRAPH_WITH_MPI != 0; }

#if CONVGRAPH_WITH_MPI

namespace {

struct World {
  std::mutex mu;
  bool initialized = false;  // init() ran (and finalize() not yet)
  bool owns_mpi = false;     // init() called MPI_Init_thread, so finalize() ends MPI
  bool finalized = false;
  int rank = 0, size = 1;
};
World& world() {
  static World w;
  return w;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw RuntimeError(msg(what, " failed on rank ", rank(), ": ", std::string(text, static_cast<std::size_t>(len))));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::float32: return MPI_FLOAT;
    case DType::float64: return MPI_DOUBLE;
    case DType::int32: return MPI_INT32_T;
    case DType::int64: return MPI_INT64_T;
    default: throw TypeError(msg("allreduce: dtype ", dtype_name(t), " has no MPI type (float32, float64, int32, int64)"));
  }
}

// Rank 0 decides, the others receive its text. A failure on rank 0 is sent as a marker so
// that the other ranks fail too instead of waiting forever.
constexpr char kFailed[] = "\x01" "failed\n";
std::string agree_from_rank0(const std::function<std::string()>& decide) {
  if (rank() != 0) {
    const std::string s = detail::broadcast_string({});
    if (s.rfind(kFailed, 0) == 0)
      throw CompileError("meta-optimizer: rank 0 failed while tuning: " + s.substr(sizeof kFailed - 1));
    return s;
  }
  std::string s;
  try {
    s = decide();
  } catch (const std::exception& e) {
    (void)detail::broadcast_string(kFailed + std::string(e.what()));
    throw;
  }
  return detail::broadcast_string(s);
}

}  // namespace

void init(int* argc, char*** argv, const InitOptions& options) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.initialized) return;
  if (w.finalized) throw RuntimeError("dist::init: MPI was finalized; it cannot be initialised again");
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    // SERIALIZED: convgraph calls MPI from whichever thread runs a Function, one at a time.
    check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "dist::init: MPI_Init_thread");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    w.owns_mpi = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  w.initialized = true;
  if (options.agree_on_tuning && w.size > 1) set_tuning_agreement(agree_from_rank0);
}

void finalize() {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (!w.initialized) return;
  set_tuning_agreement({});
  w.initialized = false;
  w.finalized = true;
  if (w.owns_mpi) MPI_Finalize();
  w.rank = 0;
  w.size = 1;
}

bool initialized() { return world().initialized; }
int rank() { return world().rank; }
int size() { return world().size; }

void barrier() {
  detail::require_mpi("dist::barrier");
  check(MPI_Barrier(MPI_COMM_WORLD), "dist::barrier: MPI_Barrier");
}

namespace detail {

void require_mpi(const std::string& who) {
  if (!initialized())
    throw RuntimeError(msg(who, ": MPI is not initialised; call convgraph::dist::init() (or use dist::Session) first",
                           world().finalized ? " - it was finalized" : ""));
}

namespace {

class MpiPending;
std::mutex g_flight_mu;
std::vector<MpiPending*> g_in_flight;  // reductions started and not yet waited for

class MpiPending final : public Pending {
 public:
  std::vector<MPI_Request> requests;

  void wait() override {
    const int rc = requests.empty() ? MPI_SUCCESS
                                    : MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    done();
    check(rc, "allreduce: MPI_Waitall");
  }
  // Drives the reduction; true when it is complete.
  bool test() {
    int flag = 0;
    const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return false;  // wait() reports it
    if (flag) requests.clear();
    return flag != 0;
  }
  ~MpiPending() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!requests.empty() && !finalized)  // abandoned by a failed call: let MPI finish with the buffer
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    done();
  }

 private:
  void done() {
    requests.clear();
    std::lock_guard<std::mutex> lock(g_flight_mu);
    g_in_flight.erase(std::remove(g_in_flight.begin(), g_in_flight.end(), this), g_in_flight.end());
  }
};

}  // namespace

std::unique_ptr<Pending> start_sum(void* data, std::int64_t count, DType dtype) {
  require_mpi("allreduce");
  const MPI_Datatype type = mpi_type(dtype);
  {
    // Open MPI progresses non-blocking collectives only inside MPI calls: each start
    // moves the earlier ones along, so they advance while the backward pass computes.
    std::lock_guard<std::mutex> lock(g_flight_mu);
    for (MpiPending* p : g_in_flight) p->test();
  }
  auto p = std::make_unique<MpiPending>();
  constexpr std::int64_t kChunk = std::int64_t{1} << 30;  // MPI counts are int
  auto* bytes = static_cast<char*>(data);
  for (std::int64_t at = 0; at < count; at += kChunk) {  // none for 0 elements (on every rank: counts agree)
    MPI_Request r;
    const auto n = static_cast<int>(std::min(kChunk, count - at));
    check(MPI_Iallreduce(MPI_IN_PLACE, bytes + at * static_cast<std::int64_t>(dtype_size(dtype)), n, type, MPI_SUM,
                         MPI_COMM_WORLD, &r),
          "allreduce: MPI_Iallreduce");
    p->requests.push_back(r);
  }
  std::lock_guard<std::mutex> lock(g_flight_mu);
  g_in_flight.push_back(p.get());
  return p;
}

void min_max(std::int64_t value, std::int64_t& lo, std::int64_t& hi) {
  require_mpi("dist");
  std::int64_t v[2] = {value, -value}, r[2];
  check(MPI_Allreduce(v, r, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "dist: MPI_Allreduce");
  hi = r[0];
  lo = -r[1];
}

void broadcast_bytes(void* data, std::size_t bytes, int root) {
  require_mpi("dist::broadcast");
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  for (std::size_t at = 0; at < bytes; at += kChunk)
    check(MPI_Bcast(static_cast<char*>(data) + at, static_cast<int>(std::min(kChunk, bytes - at)), MPI_BYTE, root,
                    MPI_COMM_WORLD),
          "dist::broadcast: MPI_Bcast");
}

std::string broadcast_string(const std::string& s, int root) {
  std::uint64_t n = s.size();
  broadcast_bytes(&n, sizeof n, root);
  std::string out = rank() == root ? s : std::string(n, '\0');
  broadcast_bytes(out.data(), out.size(), root);
  return out;
}

}  // namespace detail

#else  // no MPI: the same entry points, saying why they cannot work

namespace {
[[noreturn]] void no_mpi(const std::string& who) {
  throw RuntimeError(who + ": convgraph was built without MPI (CONVGRAPH_WITH_MPI=OFF, or no MPI was found "
                           "when it was configured; Debian: libopenmpi-dev openmpi-bin)");
}
}  // namespace

void init(int*, char***, const InitOptions&) { no_mpi("dist::init"); }
void finalize() {}
bool initialized() { return false; }
int rank() { return 0; }
int size() { return 1; }
void barrier() { no_mpi("dist::barrier"); }

namespace detail {
void require_mpi(const std::string& who) { no_mpi(who); }
std::unique_ptr<Pending> start_sum(void*, std::int64_t, DType) { no_mpi("allreduce"); }
void min_max(std::int64_t, std::int64_t&, std::int64_t&) { no_mpi("dist"); }
void broadcast_bytes(void*, std::size_t, int) { no_mpi("dist::broadcast"); }
std::string broadcast_string(const std::string&, int) { no_mpi("dist"); }
}  // namespace detail

#endif

}  // namespace convgraph::dist
