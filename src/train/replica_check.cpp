#include "train/replica_check.hpp"

#include <cstddef>
#include <iomanip>
#include <sstream>
#include <string>

namespace zs {

namespace {

std::string hex(const kernels::ParamChecksum& c) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setfill('0') << std::setw(8) << static_cast<std::uint64_t>(c.high) << std::setw(8)
     << static_cast<std::uint64_t>(c.low);
  return os.str();
}

}  // namespace

ReplicaCheck::ReplicaCheck(Trainer& trainer, ProcessGroup& group, std::int64_t every)
    : trainer_(trainer), group_(group), every_(every), sum_("zs::replica_check::sum"), box_("zs::replica_check") {
  require(every >= 1, "ReplicaCheck: every = ", every, "; expected a number of steps >= 1");
}

void ReplicaCheck::enqueue() {
  graph_.run(trainer_.stream(), [this] {
    const ExecSpace& exec = trainer_.stream().exec();
    kernels::fingerprint<ExecSpace>(exec, trainer_.online().flat(), trainer_.target().flat(), sum_);
    using WriteThenPost = kernels::ThenPost<ExecSpace, kernels::WriteChecksum<ExecSpace>>;
    Kokkos::parallel_for("zs::replica_check_post", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1),
                         WriteThenPost{{sum_, trainer_.guard().step_counter(), box_.device()}, box_.poster()});
  });
}

void ReplicaCheck::after_step() {
  if (trainer_.steps_enqueued() % every_ == 0) enqueue();
}

kernels::ParamChecksum ReplicaCheck::newest() const {
  const auto r = box_.read();
  return r ? r->value : kernels::ParamChecksum{};
}

std::int64_t ReplicaCheck::compare() {
  const kernels::ParamChecksum mine = newest();
  const auto all = group_.all_gather(std::vector<double>{mine.step, mine.high, mine.low}, "the parameter check");
  std::vector<kernels::ParamChecksum> records;
  for (const auto& v : all) {
    require(v.size() == 3, "the parameter check: a record of ", v.size(), " values arrived; expected 3");
    records.push_back({v[0], v[1], v[2]});
  }
  return compare(records);
}

std::int64_t ReplicaCheck::compare(const std::vector<kernels::ParamChecksum>& by_rank) {
  std::int64_t latest = -1;
  for (std::size_t first = 0; first < by_rank.size(); ++first) {
    const auto& ref = by_rank[first];
    if (ref.step < 0) continue;
    bool seen_before = false;
    for (std::size_t r = 0; r < first; ++r) seen_before = seen_before || by_rank[r].step == ref.step;
    if (seen_before) continue;  // this step's group was checked from its lowest rank
    std::string differ;
    int compared = 1;
    for (std::size_t r = first + 1; r < by_rank.size(); ++r) {
      if (by_rank[r].step != ref.step) continue;
      ++compared;
      if (by_rank[r].high != ref.high || by_rank[r].low != ref.low)
        differ += str(differ.empty() ? "" : ", ", "rank ", r, " holds ", hex(by_rank[r]));
    }
    if (!differ.empty())
      throw PeerFailure(str("the ranks' parameters differ after training step ", static_cast<std::int64_t>(ref.step),
                            ": rank ", first, " holds fingerprint ", hex(ref), ", ", differ,
                            ". Every rank applies the same averaged update, so they must be equal: a rank computed "
                            "differently or its memory was corrupted; stopping the run"));
    if (compared > 1 && static_cast<std::int64_t>(ref.step) > latest) latest = static_cast<std::int64_t>(ref.step);
  }
  return latest;
}

}  // namespace zs
