#include "losses/cql.hpp"

#include "kernels/cql_loss.hpp"

namespace zs {

CqlRegulariser::CqlRegulariser(const Config& c, const ParamLayout& layout, int B)
    : config_(c), out_(c, layout, B, "cql") {}

void CqlRegulariser::enqueue(const ExecSpace& exec, const Gemm& gemm, const Network& net, const ParamBuffer& params,
                             const Activations& online, const DeviceBatch& batch) {
  const Config& c = config_;
  const int B = batch.size;
  kernels::CqlLoss<ExecSpace> f;
  f.logp = online.logp;
  f.actions = batch.actions;
  f.d_value = as_matrix(out_.g.d_value_out, B, c.atoms);
  f.d_branch_out = Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>(out_.g.d_branch_out.data(),
                                                                          out_.g.d_branch_out.extent(0));
  f.table = net.table();
  f.v_min = c.v_min;
  f.delta = (c.v_max - c.v_min) / static_cast<float>(c.atoms - 1);
  f.alpha = c.cql.alpha;
  f.batch = B;
  f.widest = 0;
  for (int n : c.branches) f.widest = n > f.widest ? n : f.widest;
  kernels::cql_loss(exec, f, out_.loss);
  if (planned_for_.changed({&params, &online, &batch}))
    backward_ = std::make_unique<BackwardPlan>(net, params, batch.states(), online, out_.g, out_.grad);
  backward_->enqueue(exec, gemm);
}

}  // namespace zs
