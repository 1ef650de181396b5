// The training step from C++ in one page: a trainer from a config, a batch uploaded once, a
// thousand steps that never wait (graph replays on CUDA), lagged metrics, a checkpoint.
#include <cstdio>
#include <cstdlib>
#include <random>

#include "trainer.hpp"

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  zs::Config config;  // the reference network; zs::Config::from_file("cfg.json") reads one
  zs::TrainerOptions options;
  options.batch_size = 256;
  zs::Trainer trainer(config, options);

  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  zs::HostBatch batch;
  batch.size = options.batch_size;
  for (int i = 0; i < batch.size * config.state_dim; ++i) {
    batch.states.push_back(normal(rng));
    batch.next_states.push_back(normal(rng));
  }
  for (int i = 0; i < batch.size; ++i) {
    for (int n : config.branches) batch.actions.push_back(static_cast<int>(rng() % n));
    batch.rewards.push_back(normal(rng));
    batch.dones.push_back(0.f);
    batch.weights.push_back(1.f);
  }
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
