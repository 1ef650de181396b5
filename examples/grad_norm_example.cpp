// The zero-sync pattern in a page: a device computation enqueued on the step's stream, its
// result delivered to the host through the pinned mailbox, read lagged, never waited for.
#include <cstdio>

#include <zerosync/backends/stream.hpp>
#include <zerosync/kernels/grad_norm.hpp>
#include <zerosync/backends/mailbox.hpp>
#include <zerosync/nn/param_buffer.hpp>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  const zs::ParamLayout layout{zs::Config{}};  // the reference BDQ-C51 network
  zs::ParamBuffer grad(layout, "grad");
  Kokkos::deep_copy(grad.flat(), 0.01f);
  Kokkos::View<double*, zs::MemSpace> record("record", 1);
  zs::Mailbox mailbox(1);
  zs::Stream stream;

  const auto scratch = zs::kernels::make_grad_norms_scratch(stream.exec());  // made once: a step allocates nothing
  for (int step = 0; step < 100; ++step) {
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(grad.flat()), Kokkos::subview(record, 0),
                                  scratch);
    mailbox.post(stream.exec(), record);
    if (step % 25 == 24)  // report lagged: whatever has arrived, without waiting
      if (auto r = mailbox.read()) std::printf("step %d: newest record #%lld, norm %.4f\n", step,
                                               static_cast<long long>(r->seq), r->values[0]);
  }
  stream.synchronize();
  std::printf("final record #%lld\n", static_cast<long long>(mailbox.read()->seq));
}
