// The training step from C++ in one page: a trainer from a config, a batch uploaded once, a
// thousand steps that never wait (graph replays on CUDA), lagged metrics, a checkpoint.
#include <cstdio>
#include <cstdlib>

#include <zerosync/train/trainer.hpp>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  zs::Config config;  // the reference network; zs::Config::from_file("cfg.json") reads one
  zs::TrainerOptions options;
  options.batch_size = 256;
  zs::Trainer trainer(config, options);

  // Any batch on the device will do; here a random one from the host.
  const zs::HostBatch batch = zs::random_batch(config, options.batch_size, 1);
  zs::upload(trainer.stream().exec(), config, batch, trainer.batch());

  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  for (int i = 0; i < steps; ++i) {
    trainer.step();
    if (i % 50 == 49)
      if (auto m = trainer.metrics())  // whatever has arrived; never waits
        std::printf("step %d: loss %.4f, grad norm %.4f (%lld steps behind)%s\n", i, m->raw_loss,
                    m->raw_grad_norm, static_cast<long long>(m->steps_behind), m->skipped() ? " SKIPPED" : "");
  }
  trainer.synchronize();
  trainer.save("trainer_example.safetensors");
  std::printf("saved trainer_example.safetensors after %lld steps\n",
              static_cast<long long>(trainer.steps_enqueued()));
}
