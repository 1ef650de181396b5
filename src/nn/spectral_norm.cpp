#include "nn/spectral_norm.hpp"

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.hpp"

namespace zs {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Box–Muller on two 53-bit uniforms; u1 in (0, 1] keeps the log finite.
double standard_normal(std::uint64_t& state) {
  const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

void random_unit(std::vector<float>& out, std::size_t at, std::size_t n, std::uint64_t& state) {
  std::vector<double> x(n);
  double ss = 0.0;
  for (auto& e : x) {
    e = standard_normal(state);
    ss += e * e;
  }
  const double norm = std::sqrt(ss);
  for (std::size_t i = 0; i < n; ++i)
    out[at + i] = norm > 0.0 ? static_cast<float>(x[i] / norm) : (i == 0 ? 1.f : 0.f);
}

}  // namespace

SpectralNorm::SpectralNorm(const ParamLayout& layout, float sigma_max, std::uint64_t seed, bool one_launch)
    : sigma_max_(sigma_max), param_size_(layout.size()) {
  require(std::isfinite(sigma_max) && sigma_max > 0.f, "SpectralNorm: sigma_max = ", sigma_max,
          " is invalid; expected a finite number > 0");
  const auto& layers = layout.layers();
  require(!layers.empty(), "SpectralNorm: the layout has 0 layers; expected at least 1");
  std::int64_t cursor = 0;
  for (const auto& l : layers) {
    require(l.in >= 1 && l.out >= 1, "SpectralNorm: layer '", l.name, "' is ", l.out, "x", l.in,
            "; expected at least 1x1");
    require(l.weight_offset + static_cast<std::size_t>(l.in) * l.out <= param_size_,
            "SpectralNorm: layer '", l.name, "' ends past the buffer (", param_size_, " floats)");
    kernels::SpectralNormDesc d;
    d.weight_offset = static_cast<std::int64_t>(l.weight_offset);
    d.rows = l.out;
    d.cols = l.in;
    d.u_offset = cursor;
    cursor += l.out;
    d.v_offset = cursor;
    cursor += l.in;
    host_descs_.push_back(d);
    names_.push_back(l.name);
  }

  std::vector<float> init(static_cast<std::size_t>(cursor));
  std::uint64_t state = seed;
  for (const auto& d : host_descs_) {
    random_unit(init, d.u_offset, d.rows, state);
    random_unit(init, d.v_offset, d.cols, state);
  }

  uv_init_ = DeviceFloats(std::string("zs::spectral_norm::uv_init"), init.size());
  auto h_init = Kokkos::create_mirror_view(uv_init_);
  for (std::size_t i = 0; i < init.size(); ++i) h_init(i) = init[i];
  Kokkos::deep_copy(uv_init_, h_init);
  uv_ = DeviceFloats(std::string("zs::spectral_norm::uv"), init.size());
  Kokkos::deep_copy(uv_, uv_init_);
  sigmas_ = DeviceFloats(std::string("zs::spectral_norm::sigmas"), host_descs_.size());

  if (one_launch) {
    std::vector<ClusterMatrix> cm;
    for (const auto& d : host_descs_) cm.push_back({d.weight_offset, d.u_offset, d.v_offset, d.rows, d.cols});
    cluster_bytes_ = cluster_power_iteration_bytes(cm);
    if (cluster_bytes_ > 0) {
      cluster_matrices_ = Kokkos::View<ClusterMatrix*, MemSpace>("zs::spectral_norm::cluster_matrices", cm.size());
      auto h = Kokkos::create_mirror_view(cluster_matrices_);
      for (std::size_t i = 0; i < cm.size(); ++i) h(i) = cm[i];
      Kokkos::deep_copy(cluster_matrices_, h);
    }
  }
  // The three launches' plan only where they run (its tables are device allocations).
  if (cluster_bytes_ == 0) plan_ = kernels::make_spectral_norm_plan<ExecSpace>(host_descs_);
}

void SpectralNorm::apply(const ExecSpace& exec, const DeviceFloats& params, Kokkos::View<const int, MemSpace> skip) const {
  require(params.extent(0) == param_size_, "SpectralNorm::apply: the parameter buffer has ",
          params.extent(0), " floats; expected ", param_size_, " (the layout's size)");
  if (cluster_bytes_ > 0) {
    ClusterPowerIterationArgs a;
    a.matrices = cluster_matrices_.data();
    a.count = matrices();
    a.params = params.data();
    a.uv = uv_.data();
    a.uv_init = uv_init_.data();
    a.sigmas = sigmas_.data();
    a.sigma_max = sigma_max_;
    a.eps = kernels::kSpectralNormEps;
    a.min_sigma = kernels::kSpectralNormMinSigma;
    a.skip = skip.data();
    a.bytes = cluster_bytes_;
    return cluster_power_iteration(exec, a);
  }
  kernels::batched_spectral_norm(exec, plan_, params, uv_, ConstDeviceFloats(uv_init_), sigmas_,
                                 sigma_max_, skip);
}

}  // namespace zs
