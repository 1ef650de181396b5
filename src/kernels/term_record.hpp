// The loss terms' metrics record: per term its loss, raw gradient norm, the clip coefficient its
// share of max_grad_norm gives it (the same min(1, limit/(norm + 1e-6)) the step applies) and one
// statistic of its own (NaN when it has none), written by one thread after the guard's check.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/grad_clip.hpp"
#include "kernels/term_limits.hpp"

namespace zs::kernels {

// A record that crosses the mailbox: doubles only, fields named once here.
struct TermRecord {
  double loss = 0, grad_norm = 0, scale = 0, statistic = 0;
};
struct TermsRecord {
  double step = -1;  // the step the record belongs to; −1: none yet
  double terms = 0;  // how many entries of `term` are in use
  TermRecord term[kMaxTerms];
};

// Where one term's values live on the device.
struct TermSource {
  const float* loss = nullptr;
  const double* norm = nullptr;
  double limit = 0;                  // share × max_grad_norm
  const float* statistic = nullptr;  // none: NaN in the record
};

template <class Exec>
struct WriteTermsRecord {
  using MS = typename Exec::memory_space;
  Kokkos::View<TermsRecord, MS> record;
  Kokkos::View<const std::int64_t, MS> step;  // the guard's counter, already counted up
  TermSource source[kMaxTerms];
  int terms = 0;

  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    TermsRecord& r = record();
    r.step = static_cast<double>(step() - 1);
    r.terms = terms;
    for (int t = 0; t < terms; ++t) {
      const TermSource& s = source[t];
      r.term[t].loss = static_cast<double>(*s.loss);
      r.term[t].grad_norm = *s.norm;
      r.term[t].scale = clip_coefficient(*s.norm, s.limit);
      r.term[t].statistic = s.statistic ? static_cast<double>(*s.statistic) : static_cast<double>(NAN);
    }
  }
};

// The functor, its arguments checked (launch it with a post: see kernels::ThenPost).
template <class Exec>
WriteTermsRecord<Exec> make_terms_record(Kokkos::View<TermsRecord, typename Exec::memory_space> record,
                                         Kokkos::View<const std::int64_t, typename Exec::memory_space> step,
                                         const std::vector<TermSource>& sources) {
  require(!sources.empty() && sources.size() <= static_cast<std::size_t>(kMaxTerms), "terms_record: ",
          sources.size(), " terms; expected 1 to ", kMaxTerms);
  require(record.data() && step.data(), "terms_record: the record or the step counter is not allocated");
  WriteTermsRecord<Exec> f{record, step, {}, static_cast<int>(sources.size())};
  for (std::size_t t = 0; t < sources.size(); ++t) {
    require(sources[t].loss && sources[t].norm, "terms_record: term ", t, " has no loss or norm; expected both");
    detail::check_limit("terms_record", static_cast<float>(sources[t].limit));
    f.source[t] = sources[t];
  }
  return f;
}

}  // namespace zs::kernels
