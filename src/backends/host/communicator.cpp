// The host backend's all-reduce: MPI's, in place, on the host memory the step works in. A host
// parallel construct has finished when it returns, so everything enqueued before is in the
// buffer when the sum reads it, and the sum is in place when the next construct starts.
#include "backends/communicator.hpp"

#include <cstddef>
#include <cstdint>

namespace zs {

namespace {

struct ScaleBy {
  DeviceFloats data;
  float factor;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { data(i) *= factor; }
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(ProcessGroup& group) : Communicator(group.rank(), group.size()), group_(group) {}

  void enqueue_mean(Stream& stream, const DeviceFloats& data) override {
    const auto n = static_cast<std::int64_t>(data.extent(0));
    group_.all_sum(data.data(), static_cast<std::size_t>(n), "the gradient all-reduce");
    if (size() == 1) return;  // the sum of one rank is its own buffer
    Kokkos::parallel_for("zs::all_reduce_mean",
                         Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(stream.exec(), 0, n),
                         ScaleBy{data, 1.f / static_cast<float>(size())});
  }

 private:
  ProcessGroup& group_;
};

}  // namespace

std::unique_ptr<Communicator> make_communicator(ProcessGroup& group, Stream&) {
  return std::make_unique<MpiCommunicator>(group);
}

}  // namespace zs
