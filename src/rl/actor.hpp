// Acting on the device: the network's forward pass on a batch of observations (the step's
// batched ForwardPlan, made for the parameters at the first act()), Q from the C51 head, then
// ε-greedy per branch (ε read from device memory, counter-based RNG), into an actions buffer the
// environments read. No host involvement: a graph can record act().
#pragma once
#include <cstdint>

#include <memory>

#include "backends/gemm.hpp"
#include "kernels/acting.hpp"
#include "nn/network.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class Actor {
 public:
  using Actions = Kokkos::View<std::int32_t**, Kokkos::LayoutRight, MemSpace>;
  using QValues = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>;

  // `rows` observations per call; `rng` keeps this actor's draws apart from other users of the seed.
  Actor(const Config& config, const ParamLayout& layout, Stream& stream, int rows, kernels::ActingRng rng);

  // Enqueues: Q(params, obs) and actions ← ε-greedy(Q). obs is [rows, state_dim]. The forward
  // plan is made at the first call (outside any capture) and again only for other buffers.
  void act(const ParamBuffer& params, const ConstMatrixView& obs, Kokkos::View<const float, MemSpace> epsilon);

  int rows() const { return rows_; }
  const Actions& actions() const { return actions_; }
  const QValues& q() const { return q_; }  // of the last act(): [rows, total actions]
  // The RNG's call counter: part of a run's state (checkpoints).
  const Kokkos::View<std::uint64_t, MemSpace>& counter() const { return counter_; }

 private:
  Config config_;
  Stream& stream_;
  Gemm gemm_;
  Network net_;
  Activations acts_;
  int rows_;
  kernels::ActingRng rng_;
  QValues q_;
  Actions actions_;
  Kokkos::View<std::uint64_t, MemSpace> counter_;
  std::unique_ptr<ForwardPlan> forward_;
  PlanKey planned_for_;
};

}  // namespace zs
