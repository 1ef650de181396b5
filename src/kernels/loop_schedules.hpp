// Small kernels of the training loop around the step: the loop counter and the ε/β schedules
// (read from device memory by acting and sampling, so a recorded graph follows them), a flat
// copy, and the episode summaries posted to the host.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs::kernels {

// start → end linearly over `steps` environment steps, then end (steps ≤ 0: end throughout).
struct LinearRamp {
  float start = 0.f, end = 0.f;
  std::int64_t steps = 0;
  KOKKOS_INLINE_FUNCTION float at(std::int64_t env_steps) const {
    if (steps <= 0 || env_steps >= steps) return end;
    const double f = static_cast<double>(env_steps) / static_cast<double>(steps);
    return static_cast<float>(start + f * (static_cast<double>(end) - start));
  }
};

// The loop's schedules, each a device scalar that acting (ε) and replay (β, α) read.
template <class Exec>
struct Schedules {
  Kokkos::View<float, typename Exec::memory_space> epsilon, beta, alpha;
  LinearRamp eps_ramp, beta_ramp, alpha_ramp;
};

// counters(0) counts loop iterations (one step of every env); the schedules are evaluated at
// the iteration about to run, then the counter moves on.
template <class Exec>
struct AdvanceSchedules {
  Kokkos::View<std::int64_t*, typename Exec::memory_space> counters;
  Schedules<Exec> s;
  std::int64_t envs;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    const std::int64_t env_steps = counters(0) * envs;
    s.epsilon() = s.eps_ramp.at(env_steps);
    s.beta() = s.beta_ramp.at(env_steps);
    s.alpha() = s.alpha_ramp.at(env_steps);
    counters(0) += 1;
  }
};

template <class Exec>
void advance_schedules(const Exec& exec, const Kokkos::View<std::int64_t*, typename Exec::memory_space>& counters,
                       const Schedules<Exec>& s, std::int64_t envs) {
  require(counters.extent(0) >= 1, "advance_schedules: counters has ", counters.extent(0),
          " slots; expected at least 1");
  require(envs >= 1, "advance_schedules: envs = ", envs, "; expected >= 1");
  Kokkos::parallel_for("zs::advance_schedules", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       AdvanceSchedules<Exec>{counters, s, envs});
}

template <class Exec, class T>
struct CopyFlat {
  Kokkos::View<const T*, typename Exec::memory_space> src;
  Kokkos::View<T*, typename Exec::memory_space> dst;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { dst(i) = src(i); }
};

// dst ← src as one kernel (a graph records it like any other node).
template <class Exec, class T>
void copy_flat(const Exec& exec, const Kokkos::View<const T*, typename Exec::memory_space>& src,
               const Kokkos::View<T*, typename Exec::memory_space>& dst) {
  require(src.extent(0) == dst.extent(0), "copy_flat: source has ", src.extent(0), " elements, destination ",
          dst.extent(0), "; expected the same");
  Kokkos::parallel_for("zs::copy_flat",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(src.extent(0))),
                       CopyFlat<Exec, T>{src, dst});
}

// An episode summary (training envs: the most recent finished episode of each; evaluation envs:
// the first finished episode of each). Records that cross the mailbox are structs of doubles.
struct EpisodeSummary {
  double count = 0, mean = 0, min = 0, max = 0, episodes = 0;
};
// The training report: the device iteration counter, the schedules' values, the replay's
// sampleable count (doubles hold step counts exactly up to 2^53), and the training envs' episodes.
struct LoopReportRecord {
  double iterations = 0, epsilon = 0, beta = 0, sampleable = 0;
  EpisodeSummary episodes;
};
// One evaluation: its round, the training env steps when its parameters were taken, its episodes.
struct EvalRecord {
  double round = 0, env_steps = 0;
  EpisodeSummary episodes;
};

// One thread over the envs: the report is a few doubles, made every few thousand steps. Writes
// the summary into record().*field.
template <class Exec, class Record>
struct SummariseEpisodes {
  Kokkos::View<const float*, typename Exec::memory_space> returns;       // NaN: no episode yet
  Kokkos::View<const std::int32_t*, typename Exec::memory_space> done;   // episodes finished per env
  Kokkos::View<Record, typename Exec::memory_space> record;
  EpisodeSummary Record::*field;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    double n = 0, sum = 0, lo = 0, hi = 0, episodes = 0;
    for (std::size_t e = 0; e < returns.extent(0); ++e) {
      episodes += done(e);
      const double r = returns(e);
      if (done(e) < 1 || !(r == r)) continue;
      lo = n == 0 ? r : (r < lo ? r : lo);
      hi = n == 0 ? r : (r > hi ? r : hi);
      sum += r;
      n += 1;
    }
    EpisodeSummary& out = record().*field;
    out.count = n;
    out.mean = n > 0 ? sum / n : static_cast<double>(NAN);
    out.min = lo;
    out.max = hi;
    out.episodes = episodes;
  }
};

template <class Exec, class Record>
void summarise_episodes(const Exec& exec, const Kokkos::View<const float*, typename Exec::memory_space>& returns,
                        const Kokkos::View<const std::int32_t*, typename Exec::memory_space>& done,
                        const Kokkos::View<Record, typename Exec::memory_space>& record, EpisodeSummary Record::*field) {
  require(returns.extent(0) == done.extent(0) && returns.extent(0) >= 1, "summarise_episodes: ",
          returns.extent(0), " returns and ", done.extent(0), " episode counts; expected the same, at least 1");
  require(record.data() != nullptr, "summarise_episodes: the record is not allocated");
  Kokkos::parallel_for("zs::summarise_episodes", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       SummariseEpisodes<Exec, Record>{returns, done, record, field});
}

// The report's scalars from the device values they come from.
template <class Exec>
struct ReportScalars {
  Kokkos::View<const std::int64_t*, typename Exec::memory_space> counters;
  Kokkos::View<const float, typename Exec::memory_space> epsilon, beta;
  Kokkos::View<const std::int64_t, typename Exec::memory_space> sampleable;
  Kokkos::View<LoopReportRecord, typename Exec::memory_space> record;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    LoopReportRecord& r = record();
    r.iterations = static_cast<double>(counters(0));
    r.epsilon = epsilon();
    r.beta = beta();
    r.sampleable = static_cast<double>(sampleable());
  }
};

// An evaluation's header: its round and the env steps its parameters were taken at.
template <class Exec>
struct EvalHeader {
  Kokkos::View<EvalRecord, typename Exec::memory_space> record;
  double round, env_steps;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    record().round = round;
    record().env_steps = env_steps;
  }
};

}  // namespace zs::kernels
