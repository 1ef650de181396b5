#include "backends/process_group.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace zs {

#if ZEROSYNC_WITH_MPI
std::unique_ptr<ProcessGroup> make_mpi_group(int& argc, char**& argv);  // mpi_group.cpp
#endif

namespace {

class SoloGroup final : public ProcessGroup {
 public:
  SoloGroup() : ProcessGroup(0, 1) {}
  std::vector<std::vector<std::uint8_t>> all_gather(const std::vector<std::uint8_t>& mine,
                                                    const std::string&) override {
    return {mine};
  }
  std::vector<std::vector<std::uint8_t>> gather(const std::vector<std::uint8_t>& mine, const std::string&) override {
    return {mine};
  }
  std::vector<std::uint8_t> broadcast(const std::vector<std::uint8_t>& bytes, const std::string&) override {
    return bytes;
  }
  std::vector<std::uint8_t> scatter(const std::vector<std::vector<std::uint8_t>>& parts,
                                    const std::string& what) override {
    require(parts.size() == 1, what, ": ", parts.size(), " parts to scatter; expected 1, one per rank");
    return parts[0];
  }
  void all_sum(float*, std::size_t, const std::string&) override {}
  [[noreturn]] void abort(int status) override { std::_Exit(status); }
};

// The size an MPI launcher gave this process: 0 when none started it, -1 when one did but its
// variables do not say how many ranks there are.
int launched_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name)) return std::atoi(v) > 0 ? std::atoi(v) : -1;
  return std::getenv("PMIX_RANK") || std::getenv("PMI_RANK") ? -1 : 0;
}

}  // namespace

ProcessGroup& ProcessGroup::solo() {
  static SoloGroup group;
  return group;
}

std::unique_ptr<ProcessGroup> ProcessGroup::launch(int& argc, char**& argv) {
  const int launched = launched_size();
#if ZEROSYNC_WITH_MPI
  if (launched != 0) return make_mpi_group(argc, argv);
#else
  (void)argc;
  (void)argv;
  require(launched == 0 || launched == 1, "an MPI launcher started this process as one of ",
          launched > 0 ? std::to_string(launched) : std::string("several"),
          " ranks, but this zerosync was built without MPI (ZEROSYNC_MPI=OFF); expected a build with MPI "
          "(docs/scale-out.md) or a run without mpirun");
#endif
  return std::make_unique<SoloGroup>();
}

void ProcessGroup::set_timeout(double seconds) {
  require(std::isfinite(seconds) && seconds > 0 && seconds <= 1e6, "peer timeout = ", seconds,
          " s is invalid; expected seconds in (0, 1e6]");
  timeout_s_ = seconds;
}

std::vector<std::vector<double>> ProcessGroup::all_gather(const std::vector<double>& mine, const std::string& what) {
  std::vector<std::vector<double>> out;
  for (const auto& part : all_gather(to_bytes(mine), what)) out.push_back(doubles_from_bytes(part));
  return out;
}

void ProcessGroup::settle(const std::string& what, const std::string& failure) {
  const auto all = all_gather(to_bytes(failure), what);
  int first = -1;
  bool same = true;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[r].empty()) {
      same = false;
      continue;
    }
    if (first < 0) first = r;
    else if (all[r] != all[first]) same = false;
  }
  if (first < 0) return;
  const std::string message = text_from_bytes(all[first]);
  throw SharedError(same ? message : str("rank ", first, ": ", message));
}

std::vector<std::uint8_t> to_bytes(const std::vector<double>& values) {
  std::vector<std::uint8_t> b(values.size() * sizeof(double));
  if (!b.empty()) std::memcpy(b.data(), values.data(), b.size());
  return b;
}

std::vector<double> doubles_from_bytes(const std::vector<std::uint8_t>& bytes) {
  require(bytes.size() % sizeof(double) == 0, "a message of ", bytes.size(),
          " bytes arrived where doubles were expected; expected a multiple of ", sizeof(double));
  std::vector<double> v(bytes.size() / sizeof(double));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

std::vector<std::uint8_t> to_bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_from_bytes(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

}  // namespace zs
