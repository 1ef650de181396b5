// Global L2 norm of the flat gradient buffer, for the guard and for clipping.
// Accumulates in double: a ~200 K-term sum of squares in float loses digits that the
// grad-collapse threshold (lr × multiplier) can care about, and double costs nothing here.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/after_prior_grids.hpp"
#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/last_team.hpp"
#include "kernels/term_limits.hpp"

namespace zs::kernels {

// The norms of several gradient buffers of one length (C51's and each auxiliary's, all laid out
// as the whole parameter buffer) in one launch instead of one each: out[b] = ‖g[b]‖₂. A team per
// (buffer, chunk) sums its chunk's squares; the team that finishes a buffer last
// (finished_last) adds the chunks' partial sums in chunk order, so the result is the same every run. (Nsight: Kokkos'
// array reduction kept each thread's four sums in shared memory, 2x slower than four launches.)

// Nothing to run after the norms.
struct NoTail {
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {}
};

// A norm over one or two pieces of a buffer (a loss term's gradient where it can be nonzero:
// LossTerm::gradient_spans): ‖first‖² + ‖second‖², square-rooted; `second` may be empty.
template <class Exec>
struct NormPieces {
  Kokkos::View<const float*, typename Exec::memory_space> first, second;
};

template <class Exec, class Tail = NoTail>
struct SumsOfSquaresSqrt {
  using MS = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  // Buffer b's elements: g[b] then g2[b] (lengths len[b] − len0[b] and ...), len[b] in all.
  Kokkos::View<const float*, MS> g[kMaxTerms], g2[kMaxTerms];
  std::int64_t len0[kMaxTerms] = {}, len[kMaxTerms] = {};
  Kokkos::View<double, MS> out[kMaxTerms];
  Kokkos::View<double*, MS> partials;  // [buffer][chunk]
  // Per buffer: chunks finished, the last resets it to 0; then, at [kMaxTerms], buffers finished.
  Kokkos::View<int*, MS> done;
  std::int64_t n = 0;  // the longest buffer's elements: its chunks cut every buffer's
  int chunks = 1, buffers = 1;
  // Run by one thread once every out[b] is written (see grad_norms).
  Tail tail;

  // The team that wrote a buffer's norm counts the buffer done; the last one runs the tail.
  // Nothing in this launch reads out[] before that, so no SM holds a stale copy of it in L1.
  KOKKOS_INLINE_FUNCTION void after_norm(const Member& team) const {
    if constexpr (std::is_same<Tail, NoTail>::value) return;
    const int all = kMaxTerms;  // a copy: View::operator() takes its index by reference
    if (!finished_last(team, &done(all), buffers)) return;
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      tail(0);
      done(all) = 0;
    });
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int b = team.league_rank() / chunks, c = team.league_rank() % chunks;
    const std::int64_t per = (n + chunks - 1) / chunks, begin = c * per;
    const std::int64_t end = begin + per < len[b] ? begin + per : len[b], first = len0[b];
    const Kokkos::View<const float*, MS>& x = g[b];
    const Kokkos::View<const float*, MS>& y = g2[b];
    double sum = 0.0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, begin, end < begin ? begin : end),
        [&](const std::int64_t i, double& acc) {
          const double v = i < first ? x(i) : y(i - first);
          acc += v * v;
        },
        sum);
    if (chunks == 1) {
      Kokkos::single(Kokkos::PerTeam(team), [&]() { out[b]() = ::sqrt(sum); });
      after_norm(team);
      return;
    }
    Kokkos::single(Kokkos::PerTeam(team), [&]() { partials(b * chunks + c) = sum; });
    if (!finished_last(team, &done(b), chunks)) return;
    // The whole team adds the partials (a fixed order for a fixed team size): one thread walking
    // them would wait out an L2 round trip per chunk.
    const volatile double* const p = partials.data() + b * chunks;
    double total = 0.0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, chunks), [&](const int k, double& acc) { acc += p[k]; }, total);
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      out[b]() = ::sqrt(total);
      done(b) = 0;
    });
    after_norm(team);
  }
};

// Enqueues out[b] = ‖grads[b]‖₂ for every b, in one launch. `scratch` holds the partial sums and
// counters (make_grad_norms_scratch); it must not be shared by launches that may overlap. No fence.
template <class Exec>
struct GradNormsScratch {
  Kokkos::View<double*, typename Exec::memory_space> partials;
  Kokkos::View<int*, typename Exec::memory_space> done;
  int chunks = 1;  // the most chunks a buffer may be cut into (partials holds kMaxTerms × chunks)
};

// A device team's threads and the elements each of them sums: every load of a thread waits out
// the memory's latency before the next, so the chunks must be short enough that a launch has
// tens of thousands of threads in flight. 4 per thread is what Kokkos' range reduction had; 128
// fixed chunks (about 30 per thread for the 0.97 M parameters of B = 4096 / 512 / 256) made the
// norm 18 µs where that reduction took 8 (Nsight, H200).
inline constexpr int kNormTeamSize = 256;
inline constexpr int kNormElementsPerThread = 4;
inline constexpr int kNormMaxChunks = 4096;

// The chunks one buffer of n floats is cut into: on the host, a chunk per thread; on a device,
// enough for kNormElementsPerThread elements per thread, at most max_chunks.
template <class Exec>
int grad_norm_chunks(const Exec& exec, std::int64_t n, int max_chunks) {
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  if (host) return std::max(1, std::min(max_chunks, exec.concurrency()));
  const std::int64_t per_team = static_cast<std::int64_t>(kNormTeamSize) * kNormElementsPerThread;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(max_chunks, (n + per_team - 1) / per_team)));
}

template <class Exec>
GradNormsScratch<Exec> make_grad_norms_scratch(const Exec& exec) {
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  GradNormsScratch<Exec> s;
  s.chunks = host ? std::max(1, exec.concurrency()) : kNormMaxChunks;
  s.partials = Kokkos::View<double*, typename Exec::memory_space>(std::string("zs::grad_norms::partials"),
                                                                  kMaxTerms * s.chunks);
  s.done = Kokkos::View<int*, typename Exec::memory_space>(std::string("zs::grad_norms::done"), kMaxTerms + 1);
  return s;
}

// With a `tail` (a functor called as tail(0)), one thread runs it after every norm is written, in
// the same launch: what reads the norms next (the guard, Adam's clip scale) costs no launch.
// out[b] = ‖pieces[b]‖₂; the pieces may differ in length.
template <class Exec, class Tail = NoTail>
void grad_norms(const Exec& exec, const std::vector<NormPieces<Exec>>& pieces,
                const std::vector<Kokkos::View<double, typename Exec::memory_space>>& out,
                const GradNormsScratch<Exec>& scratch, const Tail& tail = Tail{}) {
  require(!pieces.empty() && pieces.size() <= static_cast<std::size_t>(kMaxTerms) && out.size() == pieces.size(),
          "grad_norms: ", pieces.size(), " buffers and ", out.size(), " results; expected 1 to ", kMaxTerms,
          " buffers with a result each");
  require(scratch.chunks >= 1 && scratch.partials.extent(0) >= static_cast<std::size_t>(kMaxTerms * scratch.chunks) &&
              scratch.done.extent(0) >= static_cast<std::size_t>(kMaxTerms + 1),
          "grad_norms: scratch of ", scratch.partials.extent(0), " partials for ", scratch.chunks,
          " chunks; expected one from make_grad_norms_scratch");
  SumsOfSquaresSqrt<Exec, Tail> f;
  f.tail = tail;
  f.buffers = static_cast<int>(pieces.size());
  for (std::size_t b = 0; b < pieces.size(); ++b) {
    const std::int64_t a = static_cast<std::int64_t>(pieces[b].first.extent(0));
    const std::int64_t n = a + static_cast<std::int64_t>(pieces[b].second.extent(0));
    require(n > 0, "grad_norms: buffer ", b, " holds 0 floats; expected at least 1");
    f.g[b] = pieces[b].first;
    f.g2[b] = pieces[b].second;
    f.len0[b] = a;
    f.len[b] = n;
    f.out[b] = out[b];
    f.n = std::max(f.n, n);
  }
  f.partials = scratch.partials;
  f.done = scratch.done;
  f.chunks = grad_norm_chunks(exec, f.n, scratch.chunks);
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  Kokkos::parallel_for("zs::grad_norms",
                       Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(pieces.size()) * f.chunks, host ? 1 : kNormTeamSize),
                       AfterPriorGrids<SumsOfSquaresSqrt<Exec, Tail>>(f));
}

// The same over whole buffers of one length.
template <class Exec, class Tail = NoTail>
void grad_norms(const Exec& exec, const std::vector<Kokkos::View<const float*, typename Exec::memory_space>>& grads,
                const std::vector<Kokkos::View<double, typename Exec::memory_space>>& out,
                const GradNormsScratch<Exec>& scratch, const Tail& tail = Tail{}) {
  std::vector<NormPieces<Exec>> pieces;
  for (std::size_t b = 0; b < grads.size(); ++b) {
    require(grads[b].extent(0) == grads[0].extent(0) && grads[b].extent(0) > 0, "grad_norms: buffer ", b, " holds ",
            grads[b].extent(0), " floats; expected ", grads[0].extent(0), " like buffer 0, at least 1");
    pieces.push_back({grads[b], {}});
  }
  grad_norms(exec, pieces, out, scratch, tail);
}

// Enqueues ‖grad‖₂ into `norm` (grad_norms with one buffer: Kokkos' own reduction is not used,
// so the step has one reduction kernel, deterministic for a given scratch). NaN or ±Inf anywhere
// in `grad` gives a NaN or +Inf norm, which the guard catches. No fence.
template <class Exec>
void global_grad_norm(const Exec& exec, Kokkos::View<const float*, typename Exec::memory_space> grad,
                      Kokkos::View<double, typename Exec::memory_space> norm, const GradNormsScratch<Exec>& scratch) {
  require(grad.extent(0) > 0, "global_grad_norm: the gradient buffer is empty (0 elements); expected at least 1");
  grad_norms(exec, {grad}, {norm}, scratch);
}

}  // namespace zs::kernels
