// Kokkos' tools callbacks are plain function pointers in one process-wide table, so the watch
// keeps its findings per thread (the innermost watch of the thread that fires the event), and
// the table holds its callbacks only while at least one watch lives.
#include "backends/sync_watch.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <mutex>
#include <utility>

#include "core/error.hpp"

namespace zs {

struct SyncWatch::State {
  struct Finding {
    std::string what;
    std::uint64_t times;
  };
  std::vector<Finding> seen;
  // Kokkos may fence right before each callback of a tool that hooks launches or regions
  // (kokkos_fences_for_tools). Such a fence is held here until the next event says whose it
  // was: the tool's when its callback comes next, the body's otherwise.
  std::string pending_fence;
  bool fence_pending = false;
  State* outer = nullptr;

  void add(std::string what) {
    for (auto& f : seen)
      if (f.what == what) {
        ++f.times;
        return;
      }
    seen.push_back({std::move(what), 1});
  }
  void settle_fence() {
    if (!fence_pending) return;
    fence_pending = false;
    add("fence '" + pending_fence + "'");
  }
  void note(std::string what) {
    settle_fence();
    add(std::move(what));
  }
  void fence(const char* name, bool a_tool_fences) {
    settle_fence();
    pending_fence = name ? name : "";
    fence_pending = true;
    if (!a_tool_fences) settle_fence();
  }
  // The fence just before a tool's launch or region callback was Kokkos' own, for the tool.
  void tool_called() { fence_pending = false; }
};

namespace {

namespace kt = Kokkos::Tools::Experimental;
using Kokkos::Tools::SpaceHandle;

thread_local SyncWatch::State* innermost = nullptr;

struct Hooks {
  std::mutex mutex;
  int watches = 0;
  kt::EventSet chained{};  // what was installed when the first watch began
  kt::EventSet ours{};
  bool a_tool_fences = false;
};

Hooks& hooks() {
  static Hooks h;
  return h;
}

const char* text(const char* s) { return s ? s : ""; }

void on_begin_deep_copy(SpaceHandle dst_space, const char* dst, const void* dst_ptr, SpaceHandle src_space,
                        const char* src, const void* src_ptr, std::uint64_t bytes) {
  if (innermost)
    innermost->note(str("deep copy of ", bytes, " bytes from '", text(src), "' (", src_space.name, ") to '",
                        text(dst), "' (", dst_space.name, ")"));
  if (auto next = hooks().chained.begin_deep_copy) next(dst_space, dst, dst_ptr, src_space, src, src_ptr, bytes);
}

void on_allocate(SpaceHandle space, const char* label, const void* ptr, std::uint64_t bytes) {
  if (innermost) innermost->note(str("allocation of '", text(label), "' (", bytes, " bytes in ", space.name, ")"));
  if (auto next = hooks().chained.allocate_data) next(space, label, ptr, bytes);
}

void on_deallocate(SpaceHandle space, const char* label, const void* ptr, std::uint64_t bytes) {
  if (innermost) innermost->note(str("deallocation of '", text(label), "' (", bytes, " bytes in ", space.name, ")"));
  if (auto next = hooks().chained.deallocate_data) next(space, label, ptr, bytes);
}

void on_begin_fence(const char* name, std::uint32_t device, std::uint64_t* handle) {
  if (innermost) innermost->fence(name, hooks().a_tool_fences);
  if (auto next = hooks().chained.begin_fence) next(name, device, handle);
}

// Stands in for another tool's launch or region callback, the kind Kokkos may fence before.
template <auto Slot, class... Args>
void forward(Args... args) {
  if (innermost) innermost->tool_called();
  (hooks().chained.*Slot)(args...);
}

template <auto Slot>
void forward_if_set(kt::EventSet& ours, const kt::EventSet& chained) {
  if (chained.*Slot != nullptr) ours.*Slot = &forward<Slot>;
}

bool probe_saw_fence = false;
void probe_fence(const char*, std::uint32_t, std::uint64_t*) { probe_saw_fence = true; }
void probe_launch(const char*, std::uint32_t, std::uint64_t* id) { *id = 0; }

// Whether Kokkos fences before a tool's launch and region callbacks: a tool library loaded with
// Kokkos asks for that unless it declines; callbacks set through the API get no fence. Fixed
// once Kokkos is initialised, so asked once, by sending a launch through Kokkos' dispatch with
// only these probes in the table (no other tool sees it).
bool kokkos_fences_for_tools() {
  static const bool fences = [] {
    const kt::EventSet saved = kt::get_callbacks();
    kt::EventSet probe{};
    probe.begin_parallel_for = &probe_launch;
    probe.begin_fence = &probe_fence;
    kt::set_callbacks(probe);
    std::uint64_t id = 0;
    Kokkos::Tools::beginParallelFor("zs::SyncWatch probe", 0, &id);
    kt::set_callbacks(saved);
    return probe_saw_fence;
  }();
  return fences;
}

template <auto Slot>
void put_back(kt::EventSet& now, const kt::EventSet& ours, const kt::EventSet& chained) {
  // Only if it is still ours: whoever replaced it since keeps theirs.
  if (now.*Slot == ours.*Slot) now.*Slot = chained.*Slot;
}

template <auto... Slots>
struct SlotList {
  static bool any_set(const kt::EventSet& set) { return ((set.*Slots != nullptr) || ...); }
  static void forward_set(kt::EventSet& ours, const kt::EventSet& chained) {
    (forward_if_set<Slots>(ours, chained), ...);
  }
  static void put_back_all(kt::EventSet& now, const kt::EventSet& ours, const kt::EventSet& chained) {
    (put_back<Slots>(now, ours, chained), ...);
  }
};

using FencingSlots =
    SlotList<&kt::EventSet::begin_parallel_for, &kt::EventSet::end_parallel_for, &kt::EventSet::begin_parallel_reduce,
             &kt::EventSet::end_parallel_reduce, &kt::EventSet::begin_parallel_scan, &kt::EventSet::end_parallel_scan,
             &kt::EventSet::push_region, &kt::EventSet::pop_region>;
using WatchedSlots = SlotList<&kt::EventSet::begin_deep_copy, &kt::EventSet::allocate_data,
                              &kt::EventSet::deallocate_data, &kt::EventSet::begin_fence>;

void install() {
  Hooks& h = hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (h.watches++ > 0) return;
  h.chained = kt::get_callbacks();
  h.ours = h.chained;
  h.ours.begin_deep_copy = &on_begin_deep_copy;
  h.ours.allocate_data = &on_allocate;
  h.ours.deallocate_data = &on_deallocate;
  h.ours.begin_fence = &on_begin_fence;
  h.a_tool_fences = FencingSlots::any_set(h.chained) && kokkos_fences_for_tools();
  if (h.a_tool_fences) FencingSlots::forward_set(h.ours, h.chained);
  kt::set_callbacks(h.ours);
}

void uninstall() {
  Hooks& h = hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (--h.watches > 0) return;
  kt::EventSet now = kt::get_callbacks();
  WatchedSlots::put_back_all(now, h.ours, h.chained);
  FencingSlots::put_back_all(now, h.ours, h.chained);
  kt::set_callbacks(now);
}

}  // namespace

SyncWatch::SyncWatch() : state_(std::make_unique<State>()) {
  install();
  state_->outer = innermost;
  innermost = state_.get();
}

SyncWatch::~SyncWatch() {
  innermost = state_->outer;
  uninstall();
}

std::vector<std::string> SyncWatch::findings() const {
  State s = *state_;
  s.settle_fence();
  std::vector<std::string> out;
  for (const auto& f : s.seen) out.push_back(f.times == 1 ? f.what : str(f.what, " (", f.times, " times)"));
  return out;
}

void SyncWatch::require_clean(const std::string& where) const {
  const auto found = findings();
  if (found.empty()) return;
  std::string list;
  for (const auto& f : found) list += (list.empty() ? "" : "; ") + f;
  fail(where, ": the graph body synchronised with the host: ", list,
       ". A recorded body may only launch kernels on its stream: no deep_copy, allocation or fence "
       "(docs/architecture.md, \"The step's rules\")");
}

}  // namespace zs
