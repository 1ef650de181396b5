// Small kernels of the training loop around the step: the loop counter and the ε/β schedules
// (read from device memory by acting and sampling, so a recorded graph follows them), Q from
// C51 log-probabilities for acting, a flat copy, and the episode summaries posted to the host.
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

// q[n][a] = Σ_j exp(logp[n][a][j])·z_j with z_j = v_min + j·Δz: the C51 head's expected return.
template <class Exec>
struct QFromLogProbs {
  Kokkos::View<const float***, Kokkos::LayoutRight, typename Exec::memory_space> logp;
  Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space> q;
  float v_min, dz;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::int64_t actions = static_cast<std::int64_t>(logp.extent(1));
    const int n = static_cast<int>(i / actions), a = static_cast<int>(i % actions);
    double s = 0;
    for (int j = 0; j < static_cast<int>(logp.extent(2)); ++j)
      s += ::exp(static_cast<double>(logp(n, a, j))) * (v_min + j * static_cast<double>(dz));
    q(n, a) = static_cast<float>(s);
  }
};

template <class Exec>
void q_from_log_probs(const Exec& exec,
                      const Kokkos::View<const float***, Kokkos::LayoutRight, typename Exec::memory_space>& logp,
                      float v_min, float v_max,
                      const Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space>& q) {
  require(logp.extent(0) == q.extent(0) && logp.extent(1) == q.extent(1), "q_from_log_probs: log-probs are [",
          logp.extent(0), ", ", logp.extent(1), ", atoms], Q is [", q.extent(0), ", ", q.extent(1),
          "]; expected the same rows and actions");
  require(logp.extent(2) >= 2, "q_from_log_probs: ", logp.extent(2), " atoms; expected at least 2");
  const float dz = (v_max - v_min) / static_cast<float>(logp.extent(2) - 1);
  Kokkos::parallel_for("zs::q_from_log_probs",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(q.extent(0) * q.extent(1))),
                       QFromLogProbs<Exec>{logp, q, v_min, dz});
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

// The slots of an episode summary (training envs: the most recent finished episode of each;
// evaluation envs: the first finished episode of each).
namespace episode_summary {
enum slot : int { count = 0, mean, min, max, episodes, size };
}

// One thread over the envs: the report is a few doubles, made every few thousand steps.
template <class Exec>
struct SummariseEpisodes {
  Kokkos::View<const float*, typename Exec::memory_space> returns;       // NaN: no episode yet
  Kokkos::View<const std::int32_t*, typename Exec::memory_space> done;   // episodes finished per env
  Kokkos::View<double*, typename Exec::memory_space> out;                // at offset
  int offset;
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
    out(offset + episode_summary::count) = n;
    out(offset + episode_summary::mean) = n > 0 ? sum / n : static_cast<double>(NAN);
    out(offset + episode_summary::min) = lo;
    out(offset + episode_summary::max) = hi;
    out(offset + episode_summary::episodes) = episodes;
  }
};

template <class Exec>
void summarise_episodes(const Exec& exec, const Kokkos::View<const float*, typename Exec::memory_space>& returns,
                        const Kokkos::View<const std::int32_t*, typename Exec::memory_space>& done,
                        const Kokkos::View<double*, typename Exec::memory_space>& out, int offset) {
  require(returns.extent(0) == done.extent(0) && returns.extent(0) >= 1, "summarise_episodes: ",
          returns.extent(0), " returns and ", done.extent(0), " episode counts; expected the same, at least 1");
  require(offset >= 0 && static_cast<std::size_t>(offset + episode_summary::size) <= out.extent(0),
          "summarise_episodes: offset ", offset, " does not fit a summary in ", out.extent(0), " slots");
  Kokkos::parallel_for("zs::summarise_episodes", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       SummariseEpisodes<Exec>{returns, done, out, offset});
}

// Copies a few device values of different types into report slots (doubles hold step counts
// exactly up to 2^53).
template <class Exec>
struct ReportScalars {
  Kokkos::View<const std::int64_t*, typename Exec::memory_space> counters;
  Kokkos::View<const float, typename Exec::memory_space> epsilon, beta;
  Kokkos::View<const std::int64_t, typename Exec::memory_space> sampleable;
  Kokkos::View<double*, typename Exec::memory_space> out;
  int offset;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    out(offset + 0) = static_cast<double>(counters(0));
    out(offset + 1) = epsilon();
    out(offset + 2) = beta();
    out(offset + 3) = static_cast<double>(sampleable());
  }
};

}  // namespace zs::kernels
