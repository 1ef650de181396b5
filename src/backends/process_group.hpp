// The processes of one run and the host-side messages between them. A run is either this
// process alone (no MPI launcher started it: MPI is never initialised and every collective
// returns its input), or the ranks an MPI launcher started (`mpirun -np N zerosync …`): then MPI
// carries the control plane — set-up, checkpoints, stop decisions, the parameter check — and, on
// the host backend, the gradients (communicator.hpp).
//
// Every collective is blocking and bounded: one that has not completed within timeout_s() ends
// with a PeerFailure naming the ranks that did not answer a roll call, so a rank that died or
// hangs never leaves the others waiting. A watchdog covers the waits outside these collectives
// (a device call that waits on a collective a lost peer never joins): while a Watch lives, a
// rank that reports no progress (alive()) for timeout_s() prints why and exits, which ends the
// whole run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace zs {

// A rank died, hangs, or holds parameters that differ from the others': the run cannot go on,
// and the other ranks cannot end cleanly with it (ProcessGroup::abort ends them all).
class PeerFailure : public Error {
 public:
  explicit PeerFailure(const std::string& what) : Error(what) {}
};

// An error that every rank raised at once (ProcessGroup::agree): the ranks can still end
// together, each with the same message.
class SharedError : public Error {
 public:
  explicit SharedError(const std::string& what) : Error(what) {}
};

class ProcessGroup {
 public:
  // Seconds a collective may take before the ranks that did not take part are named.
  static constexpr double kDefaultTimeout = 120.0;
  // The exit status of a run that lost a rank or whose ranks' parameters differ (docs/cli.md).
  static constexpr int kPeerFailureStatus = 4;

  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // This process alone, for code given no group.
  static ProcessGroup& solo();
  // The ranks an MPI launcher started this process among (MPI is initialised here; call before
  // Kokkos starts), or a group of one when no launcher did. Destroying the group ends MPI. Throws
  // zs::Error when a launcher started several ranks but this build has no MPI.
  static std::unique_ptr<ProcessGroup> launch(int& argc, char**& argv);

  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  // Throws zs::Error unless 0 < seconds <= 1e6.
  void set_timeout(double seconds);

  // Every rank's `mine`, in rank order, on every rank. `what` names the exchange in a failure.
  virtual std::vector<std::vector<std::uint8_t>> all_gather(const std::vector<std::uint8_t>& mine,
                                                            const std::string& what) = 0;
  // Rank 0 gets every rank's `mine` in rank order; the other ranks get nothing.
  virtual std::vector<std::vector<std::uint8_t>> gather(const std::vector<std::uint8_t>& mine,
                                                        const std::string& what) = 0;
  // Rank 0's `bytes` on every rank (the other ranks' `bytes` are ignored).
  virtual std::vector<std::uint8_t> broadcast(const std::vector<std::uint8_t>& bytes, const std::string& what) = 0;
  // Rank 0 hands parts[r] to rank r (parts holds size() entries there; it is ignored elsewhere);
  // every rank returns its own part.
  virtual std::vector<std::uint8_t> scatter(const std::vector<std::vector<std::uint8_t>>& parts,
                                            const std::string& what) = 0;
  // data[0, n) ← its sum over the ranks, in place, in host memory; every rank gets the same bits.
  virtual void all_sum(float* data, std::size_t n, const std::string& what) = 0;
  // Tells the watchdog that this rank is making progress.
  virtual void alive() {}

  // While one lives (they nest), the watchdog ends this rank after timeout_s() without alive():
  // around a loop that reports progress regularly and must keep step with the other ranks.
  class Watch {
   public:
    explicit Watch(ProcessGroup& g) : g_(g) { g_.watching(+1); }
    ~Watch() { g_.watching(-1); }
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

   private:
    ProcessGroup& g_;
  };
  // Ends every rank of the run now with exit status `status`; for a failure that leaves ranks
  // unable to end together (a PeerFailure, an error on one rank only).
  [[noreturn]] virtual void abort(int status) = 0;

  // Each rank's doubles, in rank order, on every rank.
  std::vector<std::vector<double>> all_gather(const std::vector<double>& mine, const std::string& what);

  // Runs f() on every rank and then lets every rank know how it went: when it threw on any rank,
  // every rank throws one SharedError carrying the first failing rank's message (named by rank
  // when the ranks' messages differ). Alone, f() runs as it is and its exceptions pass unchanged.
  template <class F>
  void agree(const std::string& what, F&& f) {
    if (size_ == 1) return f();
    std::string failure;
    try {
      f();
    } catch (const PeerFailure&) {
      throw;  // the others are already gone or going: agreeing would only wait for them
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "(an error without a message)";
    }
    settle(what, failure);
  }

 protected:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  // Watch's count of watchers changes by `delta`.
  virtual void watching(int) {}

 private:
  // Every rank's failure message ("" for none) to every rank; throws SharedError when any is set.
  void settle(const std::string& what, const std::string& failure);

  int rank_ = 0, size_ = 1;
  double timeout_s_ = kDefaultTimeout;
};

// Bytes ↔ doubles and text, for messages through a ProcessGroup.
std::vector<std::uint8_t> to_bytes(const std::vector<double>& values);
std::vector<double> doubles_from_bytes(const std::vector<std::uint8_t>& bytes);
std::vector<std::uint8_t> to_bytes(const std::string& text);
std::string text_from_bytes(const std::vector<std::uint8_t>& bytes);

}  // namespace zs
