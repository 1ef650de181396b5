// Device → host values without the host ever waiting. A one-thread kernel on the step's
// stream stores a record into pinned host memory; the host reads the newest complete record
// whenever it likes. Records are tagged with a sequence number kept on the device, so a
// captured graph that posts on every replay still counts up, and a reader knows how fresh
// what it sees is.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/backend.hpp"
#include "backends/then.hpp"
#include "core/error.hpp"

namespace zs {

namespace kernels {

// Seqlock writer: begin tag, payload, end tag, with system-scope fences between, so a host
// reader that sees equal tags saw a whole record.
template <class Exec>
struct MailboxPost {
  Kokkos::View<const double*, typename Exec::memory_space> values;
  Kokkos::View<std::int64_t, typename Exec::memory_space> counter;
  Kokkos::View<std::int64_t*, PinnedSpace> tags;
  Kokkos::View<double*, PinnedSpace> payload;
  // Optional gate: post only when gate() is a multiple of `every` (a device step counter, so a
  // captured graph still posts every N-th replay). No gate: post every time.
  Kokkos::View<const std::int64_t, typename Exec::memory_space> gate;
  std::int64_t every = 1;

  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    if (gate.data() != nullptr && gate() % every != 0) return;
    const std::int64_t seq = counter() + 1;
    counter() = seq;
    tags(0) = seq;
    system_fence();
    for (std::size_t i = 0; i < values.extent(0); ++i) payload(i) = values(i);
    system_fence();
    tags(1) = seq;
  }
};

// `write`, then a post of what it wrote, in the same thread: a record costs a graph no node of
// its own.
template <class Exec, class Write>
using ThenPost = Then<Write, MailboxPost<Exec>>;

}  // namespace kernels

class Mailbox {
 public:
  struct Record {
    std::int64_t seq = 0;  // 1 for the first post, then +1 per post
    std::vector<double> values;
  };

  explicit Mailbox(int slots)
      : counter_("zs::mailbox::counter"),
        tags_("zs::mailbox::tags", 2),
        payload_("zs::mailbox::payload", check_slots(slots)) {}

  int slots() const { return static_cast<int>(payload_.extent(0)); }

  // Enqueues a copy of `values` (device memory, exactly slots() doubles) on `exec`.
  void post(const ExecSpace& exec, Kokkos::View<const double*, MemSpace> values) const {
    post_every(exec, values, {}, 1);
  }
  // The same, but the kernel posts only when gate() (read on the device when it runs) is a
  // multiple of `every`: metrics every N steps without the host deciding per step.
  void post_every(const ExecSpace& exec, Kokkos::View<const double*, MemSpace> values,
                  Kokkos::View<const std::int64_t, MemSpace> gate, std::int64_t every) const {
    Kokkos::parallel_for("zs::mailbox_post", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), poster(values, gate, every));
  }
  // post_every's one-thread functor, for a one-thread kernel that writes `values` to post them
  // itself, in the same launch.
  kernels::MailboxPost<ExecSpace> poster(Kokkos::View<const double*, MemSpace> values,
                                         Kokkos::View<const std::int64_t, MemSpace> gate, std::int64_t every) const {
    require(values.extent(0) == payload_.extent(0), "Mailbox::post: ", values.extent(0),
            " values given; expected ", payload_.extent(0));
    require(every >= 1, "Mailbox::post_every: every = ", every, "; expected >= 1");
    return kernels::MailboxPost<ExecSpace>{values, counter_, tags_, payload_, gate, every};
  }

  // The newest complete record, or nothing when no record has arrived yet (or a write was
  // in progress on every attempt). Never waits for the device.
  std::optional<Record> read() const {
    for (int attempt = 0; attempt < 64; ++attempt) {
      const std::int64_t end = load(tags_.data() + 1);
      if (end == 0) return std::nullopt;
      std::atomic_thread_fence(std::memory_order_acquire);
      Record r;
      r.seq = end;
      r.values.resize(payload_.extent(0));
      for (std::size_t i = 0; i < r.values.size(); ++i) r.values[i] = load(payload_.data() + i);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (load(tags_.data()) == end) return r;
    }
    return std::nullopt;
  }

 private:
  static int check_slots(int slots) {
    require(slots >= 1 && slots <= 4096, "Mailbox: slots = ", slots, "; expected 1..4096");
    return slots;
  }
  template <class T>
  static T load(const T* p) {
    return *static_cast<const volatile T*>(p);
  }

  DeviceScalar<std::int64_t> counter_;
  Kokkos::View<std::int64_t*, PinnedSpace> tags_;
  Kokkos::View<double*, PinnedSpace> payload_;
};

// A record type T — a struct of doubles, its fields named once in its declaration — that
// kernels write in device memory as they would any struct and the host reads back as a T: the
// same declaration encodes and decodes it, with no slot numbers anywhere.
template <class T>
class RecordBox {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) % sizeof(double) == 0 &&
                    alignof(T) == alignof(double),
                "RecordBox<T>: T must be a struct of doubles (fields posted as they are)");

 public:
  static constexpr int slots = static_cast<int>(sizeof(T) / sizeof(double));
  struct Received {
    std::int64_t seq = 0;  // 1 for the first post, then +1 per post
    T value;
  };

  explicit RecordBox(const std::string& label) : value_(label), box_(slots) {}

  // The record in device memory, for kernels to write.
  Kokkos::View<T, MemSpace> device() const { return value_; }
  void post(const ExecSpace& exec) const { box_.post(exec, doubles()); }
  void post_every(const ExecSpace& exec, Kokkos::View<const std::int64_t, MemSpace> gate, std::int64_t every) const {
    box_.post_every(exec, doubles(), gate, every);
  }
  // The post's functor, for a one-thread kernel that writes the record to post it in the same launch.
  kernels::MailboxPost<ExecSpace> poster(Kokkos::View<const std::int64_t, MemSpace> gate = {},
                                         std::int64_t every = 1) const {
    return box_.poster(doubles(), gate, every);
  }
  // The newest complete record, or nothing before the first post arrives. Never waits.
  std::optional<Received> read() const {
    const auto rec = box_.read();
    if (!rec) return std::nullopt;
    Received r;
    r.seq = rec->seq;
    std::memcpy(static_cast<void*>(&r.value), rec->values.data(), sizeof(T));
    return r;
  }
  // The record's bytes as doubles in device memory (checkpoints save and restore them as they are).
  Kokkos::View<double*, MemSpace, Kokkos::MemoryUnmanaged> doubles() const {
    return Kokkos::View<double*, MemSpace, Kokkos::MemoryUnmanaged>(reinterpret_cast<double*>(value_.data()), slots);
  }

 private:
  Kokkos::View<T, MemSpace> value_;
  Mailbox box_;
};

}  // namespace zs
