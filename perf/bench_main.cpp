// Google Benchmark main with Kokkos brought up around the run. Results: --benchmark_format=json
// or --benchmark_out=FILE; times per call are device times (CUDA events / fenced host clock).
// Under an MPI launcher every rank runs the benchmarks, and BM_StepAllReduce averages over them.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <memory>
#include <string>

#include "backends/device_info.hpp"
#include "backends/process_group.hpp"
#include "bench_util.hpp"

namespace {
zs::ProcessGroup* g_group = nullptr;
}

zs::ProcessGroup* zs::bench::group() { return g_group; }

int main(int argc, char** argv) {
  // MPI before Kokkos, and after it at the end.
  const auto group = zs::ProcessGroup::launch(argc, argv);
  g_group = group.get();
  // Kokkos warns on every start when OMP_PROC_BIND is unset; binding stays the user's choice.
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const auto info = zs::device_info();
  benchmark::AddCustomContext("zerosync_backend", info.backend);
  benchmark::AddCustomContext("kokkos_version", info.kokkos_version);
  benchmark::AddCustomContext("ranks", std::to_string(group->size()));
  for (std::size_t i = 0; i < info.devices.size(); ++i)
    benchmark::AddCustomContext("device_" + std::to_string(i), info.devices[i]);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
