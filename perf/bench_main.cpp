// Google Benchmark main with Kokkos brought up around the run. Results: --benchmark_format=json
// or --benchmark_out=FILE; times per call are device times (CUDA events / fenced host clock).
// Under an MPI launcher every rank runs the benchmarks, and BM_StepAllReduce averages over them;
// rank 0 alone reports (prints and writes --benchmark_out), so one file holds one run.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/device_info.hpp"
#include "backends/process_group.hpp"
#include "bench_util.hpp"

namespace {
zs::ProcessGroup* g_group = nullptr;

// What the ranks other than 0 report: nothing.
class SilentReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// argv without --benchmark_out and --benchmark_out_format (ranks other than 0 write no file).
void drop_output_flags(int& argc, char** argv) {
  int kept = 1;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--benchmark_out", std::strlen("--benchmark_out")) != 0) argv[kept++] = argv[i];
  argc = kept;
  argv[argc] = nullptr;
}
}  // namespace

zs::ProcessGroup* zs::bench::group() { return g_group; }

int main(int argc, char** argv) {
  // MPI before Kokkos, and after it at the end.
  const auto group = zs::ProcessGroup::launch(argc, argv);
  g_group = group.get();
  // Kokkos warns on every start when OMP_PROC_BIND is unset; binding stays the user's choice.
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  const bool leader = group->rank() == 0;
  if (!leader) drop_output_flags(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const auto info = zs::device_info();
  benchmark::AddCustomContext("zerosync_backend", info.backend);
  benchmark::AddCustomContext("kokkos_version", info.kokkos_version);
  benchmark::AddCustomContext("ranks", std::to_string(group->size()));
  for (std::size_t i = 0; i < info.devices.size(); ++i)
    benchmark::AddCustomContext("device_" + std::to_string(i), info.devices[i]);
  SilentReporter silent;
  if (leader) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  return 0;
}
