// The ranks an MPI launcher started, over MPI. Only this file includes <mpi.h>.
//
// Collectives are point-to-point messages through rank 0 (set-up, checkpoints, decisions: a few
// per thousand steps, so rank 0 handling each rank in turn costs nothing that matters) and
// MPI_Iallreduce for the gradients. All of them are non-blocking calls polled against a
// deadline; while it polls, a rank also answers the roll calls of ranks whose own deadline has
// passed, so that a rank that gives up can tell the ranks that are still there (waiting like
// itself) from those that are not.
//
// MPI's C interface only: its C++ bindings are deprecated (and would warn under -Wextra).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/process_group.hpp"

namespace zs {

namespace {

using Clock = std::chrono::steady_clock;

// Tags of this group's point-to-point messages, on its own duplicate of MPI_COMM_WORLD.
enum Tag : int { kSizeTag = 7101, kDataTag = 7102, kPingTag = 7103, kPongTag = 7104 };
// Largest message in one MPI call: counts are ints.
constexpr std::size_t kChunk = std::size_t{1} << 30;

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(int rank, int size, MPI_Comm comm) : ProcessGroup(rank, size), comm_(comm) {
    alive();
    if (size > 1) watchdog_ = std::thread([this] { watch(); });
  }

  ~MpiGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  std::vector<std::vector<std::uint8_t>> gather(const std::vector<std::uint8_t>& mine,
                                                const std::string& what) override {
    const auto start = Clock::now();
    if (rank() != 0) {
      Sends sends;
      send(0, mine, sends);
      wait(sends.requests, Kind::sends, what, start);
      return {};
    }
    std::vector<std::vector<std::uint8_t>> all(size());
    all[0] = mine;
    std::vector<int> from;
    for (int r = 1; r < size(); ++r) from.push_back(r);
    receive(from, all, what, start);
    return all;
  }

  std::vector<std::uint8_t> broadcast(const std::vector<std::uint8_t>& bytes, const std::string& what) override {
    const auto start = Clock::now();
    if (rank() == 0) {
      Sends sends;
      for (int r = 1; r < size(); ++r) send(r, bytes, sends);
      wait(sends.requests, Kind::sends, what, start);
      return bytes;
    }
    std::vector<std::vector<std::uint8_t>> got(1);
    receive({0}, got, what, start);
    return got[0];
  }

  std::vector<std::vector<std::uint8_t>> all_gather(const std::vector<std::uint8_t>& mine,
                                                    const std::string& what) override {
    // Rank 0 packs every part behind a table of their sizes and sends that to everyone.
    const auto parts = gather(mine, what);
    std::vector<std::uint8_t> packed;
    if (rank() == 0) {
      std::vector<std::uint64_t> sizes;
      for (const auto& p : parts) sizes.push_back(p.size());
      packed.resize(sizes.size() * sizeof(std::uint64_t));
      std::memcpy(packed.data(), sizes.data(), packed.size());
      for (const auto& p : parts) packed.insert(packed.end(), p.begin(), p.end());
    }
    packed = broadcast(packed, what);
    std::vector<std::vector<std::uint8_t>> out(size());
    std::size_t at = size() * sizeof(std::uint64_t);
    require(packed.size() >= at, what, ": a message of ", packed.size(), " bytes; expected at least ", at);
    for (int r = 0; r < size(); ++r) {
      std::uint64_t n = 0;
      std::memcpy(&n, packed.data() + r * sizeof(std::uint64_t), sizeof n);
      require(n <= packed.size() - at, what, ": part ", r, " claims ", n, " bytes; only ", packed.size() - at, " remain");
      out[r].assign(packed.begin() + static_cast<std::ptrdiff_t>(at), packed.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
    return out;
  }

  std::vector<std::uint8_t> scatter(const std::vector<std::vector<std::uint8_t>>& parts,
                                    const std::string& what) override {
    const auto start = Clock::now();
    if (rank() == 0) {
      require(static_cast<int>(parts.size()) == size(), what, ": ", parts.size(), " parts to scatter; expected ",
              size(), ", one per rank");
      Sends sends;
      for (int r = 1; r < size(); ++r) send(r, parts[r], sends);
      wait(sends.requests, Kind::sends, what, start);
      return parts[0];
    }
    std::vector<std::vector<std::uint8_t>> got(1);
    receive({0}, got, what, start);
    return got[0];
  }

  void all_sum(float* data, std::size_t n, const std::string& what) override {
    const auto start = Clock::now();
    std::vector<MPI_Request> requests;
    for (std::size_t at = 0; at < n; at += kChunk / sizeof(float)) {
      const auto count = static_cast<int>(std::min(n - at, kChunk / sizeof(float)));
      requests.emplace_back();
      check(MPI_Iallreduce(MPI_IN_PLACE, data + at, count, MPI_FLOAT, MPI_SUM, comm_, &requests.back()), what);
    }
    wait(requests, Kind::collective, what, start);
  }

  void alive() override {
    last_alive_ns_.store(Clock::now().time_since_epoch().count());
    watchdog_limit_s_.store(timeout_s());
  }

  void watching(int delta) override {
    alive();
    watchers_ += delta;
  }

  [[noreturn]] void abort(int status) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);  // MPI_Abort does not return; this only satisfies [[noreturn]]
  }

 private:
  // Sizes of the messages in flight: their buffers must live until the sends complete.
  struct Sends {
    std::vector<MPI_Request> requests;
    std::deque<std::uint64_t> sizes;
  };

  void check(int code, const std::string& what) const {
    if (code != MPI_SUCCESS) throw PeerFailure(str(what, " failed in MPI: ", mpi_error(code)));
  }

  // A message is its size, then its bytes in chunks of at most kChunk.
  void send(int to, const std::vector<std::uint8_t>& bytes, Sends& s) const {
    s.sizes.push_back(bytes.size());
    s.requests.emplace_back();
    check(MPI_Isend(&s.sizes.back(), 1, MPI_UINT64_T, to, kSizeTag, comm_, &s.requests.back()), "a send");
    for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
      s.requests.emplace_back();
      check(MPI_Isend(bytes.data() + at, static_cast<int>(std::min(bytes.size() - at, kChunk)), MPI_BYTE, to, kDataTag,
                      comm_, &s.requests.back()),
            "a send");
    }
  }

  // Receives one message from each rank in `from` into out[i] (out[from[i]] when out holds a
  // part per rank).
  void receive(const std::vector<int>& from, std::vector<std::vector<std::uint8_t>>& out, const std::string& what,
               Clock::time_point start) {
    const bool per_rank = static_cast<int>(out.size()) == size();
    std::vector<std::uint64_t> sizes(from.size());
    std::vector<MPI_Request> requests(from.size());
    for (std::size_t i = 0; i < from.size(); ++i)
      check(MPI_Irecv(&sizes[i], 1, MPI_UINT64_T, from[i], kSizeTag, comm_, &requests[i]), what);
    wait(requests, Kind::receives, what, start);
    requests.clear();
    for (std::size_t i = 0; i < from.size(); ++i) {
      auto& buf = out[per_rank ? from[i] : i];
      require(sizes[i] < (std::uint64_t{1} << 46), what, ": rank ", from[i], " announced ", sizes[i],
              " bytes; expected less than 2^46");
      buf.resize(sizes[i]);
      for (std::size_t at = 0; at < buf.size(); at += kChunk) {
        requests.emplace_back();
        check(MPI_Irecv(buf.data() + at, static_cast<int>(std::min(buf.size() - at, kChunk)), MPI_BYTE, from[i],
                        kDataTag, comm_, &requests.back()),
              what);
      }
    }
    wait(requests, Kind::receives, what, start);
  }

  // What a wait's requests are, for giving them up when it fails.
  enum class Kind { receives, sends, collective };

  // Polls until every request completes; past the deadline, a roll call names who is missing.
  void wait(std::vector<MPI_Request>& requests, Kind kind, const std::string& what, Clock::time_point start) {
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s()));
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), what);
      if (done) break;
      answer_roll_calls();
      alive();  // a bounded wait is progress for the watchdog: its own deadline ends it
      if (Clock::now() > deadline) {
        give_up(requests, kind);
        lost(what);
      }
      // Spin briefly (a step's all-reduce takes microseconds to milliseconds), then stop
      // taking a core from the ranks that share this machine.
      if (polls < 2000) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(polls < 20000 ? 50 : 1000));
    }
    alive();
  }

  // Receives still posted would write into buffers about to go: cancel them. Sends and
  // collectives cannot be taken back; they are left to MPI (a PeerFailure ends the run).
  static void give_up(std::vector<MPI_Request>& requests, Kind kind) {
    for (auto& r : requests) {
      if (r == MPI_REQUEST_NULL) continue;
      if (kind == Kind::receives) {
        MPI_Cancel(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      } else if (kind == Kind::sends) {
        MPI_Request_free(&r);
      }
    }
  }

  void answer_roll_calls() {
    static const char pong = 1;
    for (;;) {
      int flag = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, comm_, &flag, &status);
      if (!flag) return;
      char ping = 0;
      MPI_Recv(&ping, 1, MPI_CHAR, status.MPI_SOURCE, kPingTag, comm_, MPI_STATUS_IGNORE);
      MPI_Request r;
      MPI_Isend(&pong, 1, MPI_CHAR, status.MPI_SOURCE, kPongTag, comm_, &r);
      MPI_Request_free(&r);
    }
  }

  // Asks every other rank whether it is there; one that answers is alive (waiting in a
  // collective of its own), one that does not died, hangs, or is blocked outside MPI.
  [[noreturn]] void lost(const std::string& what) {
    static const char ping = 1;
    std::vector<char> pongs(size(), 0);
    std::vector<MPI_Request> asked, answers(size(), MPI_REQUEST_NULL);
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      asked.emplace_back();
      MPI_Isend(&ping, 1, MPI_CHAR, r, kPingTag, comm_, &asked.back());
      MPI_Irecv(&pongs[r], 1, MPI_CHAR, r, kPongTag, comm_, &answers[r]);
    }
    // The whole window, even once everyone has answered: a rank that gave up at about the same
    // time is calling its own roll, and this rank must be there to answer it.
    const auto window = std::chrono::duration<double>(std::min(timeout_s(), 5.0));
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(window);
    std::vector<bool> answered(size(), false);
    answered[rank()] = true;
    while (Clock::now() < until) {
      answer_roll_calls();
      alive();
      for (int r = 0; r < size(); ++r) {
        if (answered[r]) continue;
        int flag = 0;
        MPI_Test(&answers[r], &flag, MPI_STATUS_IGNORE);
        answered[r] = flag != 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<int> silent;
    for (int r = 0; r < size(); ++r)
      if (!answered[r]) silent.push_back(r);
    give_up(answers, Kind::receives);
    give_up(asked, Kind::sends);
    const std::string waited = str(what, " did not complete within ", timeout_s(), " s");
    if (silent.empty())
      throw PeerFailure(str(waited, "; every rank answered a roll call, so one is slow rather than lost ",
                            "(raise --peer-timeout if a rank legitimately needs longer, e.g. for a large checkpoint)"));
    throw PeerFailure(str(waited, "; rank", silent.size() > 1 ? "s " : " ", rank_list(silent),
                          " did not answer a roll call within ", window.count(),
                          " s (died, hangs, or is blocked outside MPI, e.g. in a device call)"));
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(500));
      if (stopping_) return;
      const double idle =
          std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(last_alive_ns_.load()))
              .count();
      const double limit = watchdog_limit_s_.load();
      if (watchers_.load() <= 0 || idle <= limit) continue;
      std::fprintf(stderr,
                   "zerosync: error: rank %d of %d: no progress for %.0f s (--peer-timeout %g s): this rank was "
                   "stopped, or is blocked outside a bounded wait (e.g. a device call waiting on a collective that a "
                   "lost rank never joins); ending the run\n",
                   rank(), size(), idle, limit);
      std::fflush(stderr);
      // MPI may only be called from the main thread here; leaving without finalising is what
      // makes the launcher end the other ranks.
      std::_Exit(kPeerFailureStatus);
    }
  }

  MPI_Comm comm_;
  std::thread watchdog_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::atomic<Clock::rep> last_alive_ns_{0};
  std::atomic<double> watchdog_limit_s_{kDefaultTimeout};
  std::atomic<int> watchers_{0};
};

}  // namespace

std::unique_ptr<ProcessGroup> make_mpi_group(int& argc, char**& argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  require(!initialised, "MPI was initialised before zerosync's process group; expected zerosync to initialise it");
  int provided = 0;
  // Only the main thread calls MPI; the watchdog thread never does.
  const int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  require(rc == MPI_SUCCESS, "MPI_Init_thread failed: ", mpi_error(rc));
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  // Errors come back as codes (then a PeerFailure naming the call) rather than ending the process
  // inside MPI without a word.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return std::make_unique<MpiGroup>(rank, size, comm);
}

}  // namespace zs
