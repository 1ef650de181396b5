// A naive double-precision BDQ-C51 network and C51 double-DQN loss, written from the math in
// docs/architecture.md and docs/kernels.md, sharing nothing with the device code but the
// parameter layout's offsets. The reference the device network and loss are tested against.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/param_layout.hpp"

namespace zs::test {

struct RefBatch {
  int B = 0;
  std::vector<double> states, next_states;  // [B, state_dim]
  std::vector<int> actions;                 // [B, K]
  std::vector<double> rewards, dones, weights;
};

struct RefLoss {
  double loss = 0;
  std::vector<double> priorities;  // [B]
  std::vector<int> best;           // [B, K]
  std::vector<double> margin;      // [B, K]: Q(a*) − the runner-up's Q (a float argmax may flip below ~1e-5)
  std::vector<double> projected;   // [B, K, atoms]: the target distributions m
};

class RefNet {
 public:
  RefNet(const Config& c, const ParamLayout& l) : c_(c), l_(l) {
    for (int n : c.branches) {
      cum_.push_back(actions_);
      actions_ += n;
    }
    cum_.push_back(actions_);
  }
  int actions() const { return actions_; }

  // Trunk output [R, trunk.back()] of the network with parameters P (flat, layout offsets).
  std::vector<double> features(const std::vector<double>& P, const std::vector<double>& x, int R) const {
    std::vector<double> h = x;
    int width = c_.state_dim, layer = 0;
    for (int w : c_.trunk) {
      h = dense(P, layer++, h, R, width, true);
      width = w;
    }
    return h;
  }

  // log-probabilities [R, A, atoms] of the network with parameters P (flat, layout offsets).
  std::vector<double> forward(const std::vector<double>& P, const std::vector<double>& x, int R) const {
    return heads(P, features(P, x, R), R, static_cast<int>(c_.trunk.size()));
  }

  // log-probabilities [R, A, atoms] of the head set whose value.0 is layer `layer` (branches follow).
  std::vector<double> heads(const std::vector<double>& P, const std::vector<double>& feat, int R, int layer) const {
    const int F = c_.trunk.back();
    auto vh = dense(P, layer, feat, R, F, true);
    auto vo = dense(P, layer + 1, vh, R, c_.head_hidden, false);
    const int A = actions_, J = c_.atoms;
    std::vector<double> logp(std::size_t(R) * A * J);
    for (std::size_t k = 0; k < c_.branches.size(); ++k) {
      const int l0 = layer + 2 + 2 * static_cast<int>(k), n = c_.branches[k];
      auto bh = dense(P, l0, feat, R, F, true);
      auto bo = dense(P, l0 + 1, bh, R, c_.head_hidden, false);  // [R, n·J], unit a·J + j
      for (int r = 0; r < R; ++r)
        for (int a = 0; a < n; ++a) {
          std::vector<double> q(J);
          for (int j = 0; j < J; ++j) {
            double mean = 0;
            for (int b = 0; b < n; ++b) mean += bo[std::size_t(r) * n * J + b * J + j];
            q[j] = vo[std::size_t(r) * J + j] + bo[std::size_t(r) * n * J + a * J + j] - mean / n;
          }
          double mx = q[0];
          for (double v : q) mx = std::max(mx, v);
          double s = 0;
          for (double v : q) s += std::exp(v - mx);
          for (int j = 0; j < J; ++j) logp[(std::size_t(r) * A + cum_[k] + a) * J + j] = q[j] - mx - std::log(s);
        }
    }
    return logp;
  }

  RefLoss loss(const std::vector<double>& online, const std::vector<double>& target, const RefBatch& b) const {
    const int B = b.B, A = actions_, J = c_.atoms, K = static_cast<int>(c_.branches.size());
    const auto lp = forward(online, b.states, B);
    const auto lp2 = forward(online, b.next_states, B);
    const auto lt = forward(target, b.next_states, B);
    const double dz = (double(c_.v_max) - c_.v_min) / (J - 1);
    const double gn = std::pow(double(c_.gamma), c_.n_step);
    RefLoss out;
    out.priorities.assign(B, 0);
    out.best.assign(std::size_t(B) * K, 0);
    out.margin.assign(std::size_t(B) * K, INFINITY);
    out.projected.assign(std::size_t(B) * K * J, 0.0);
    for (int i = 0; i < B; ++i) {
      double L = 0;
      for (int k = 0; k < K; ++k) {
        const int c0 = cum_[k], n = c_.branches[k];
        int best = 0;
        double qb = -INFINITY, q2 = -INFINITY;
        for (int a = 0; a < n; ++a) {
          double q = 0;
          for (int j = 0; j < J; ++j) q += std::exp(lp2[(std::size_t(i) * A + c0 + a) * J + j]) * (c_.v_min + j * dz);
          if (q > qb) { q2 = qb; qb = q; best = a; }
          else if (q > q2) q2 = q;
        }
        out.best[i * K + k] = best;
        out.margin[i * K + k] = qb - q2;
        std::vector<double> m(J, 0.0);
        for (int j = 0; j < J; ++j) {
          const double p = std::exp(lt[(std::size_t(i) * A + c0 + best) * J + j]);
          const double tz = std::min<double>(c_.v_max, std::max<double>(c_.v_min, b.rewards[i] + gn * (1 - b.dones[i]) * (c_.v_min + j * dz)));
          const double pos = (tz - c_.v_min) / dz;
          const double lo = std::floor(pos), hi = std::ceil(pos);
          if (lo == hi) m[int(lo)] += p;
          else { m[int(lo)] += p * (hi - pos); m[int(hi)] += p * (pos - lo); }
        }
        for (int j = 0; j < J; ++j) out.projected[(std::size_t(i) * K + k) * J + j] = m[j];
        double ce = 0;
        for (int j = 0; j < J; ++j) ce -= m[j] * lp[(std::size_t(i) * A + c0 + b.actions[i * K + k]) * J + j];
        L += ce / K;
      }
      out.priorities[i] = L;
      out.loss += b.weights[i] * L / B;
    }
    return out;
  }

  // Q = Σ_j p_j·z_j of global action g, row r, from log-probabilities [R, A, atoms].
  double q_of(const std::vector<double>& lp, int r, int g) const {
    const int J = c_.atoms;
    const double dz = (double(c_.v_max) - c_.v_min) / (J - 1);
    double q = 0;
    for (int j = 0; j < J; ++j) q += std::exp(lp[(std::size_t(r) * actions_ + g) * J + j]) * (c_.v_min + j * dz);
    return q;
  }

  // CQL: α/(B·K)·Σ_i Σ_k (logsumexp_a Q_k(s_i, a) − Q_k(s_i, a_ik)) on the online net.
  double cql(const std::vector<double>& P, const RefBatch& b) const {
    const int K = static_cast<int>(c_.branches.size());
    const auto lp = forward(P, b.states, b.B);
    double total = 0;
    for (int i = 0; i < b.B; ++i)
      for (int k = 0; k < K; ++k) {
        double mx = -INFINITY;
        for (int a = 0; a < c_.branches[k]; ++a) mx = std::max(mx, q_of(lp, i, cum_[k] + a));
        double s = 0;
        for (int a = 0; a < c_.branches[k]; ++a) s += std::exp(q_of(lp, i, cum_[k] + a) - mx);
        total += mx + std::log(s) - q_of(lp, i, cum_[k] + b.actions[i * K + k]);
      }
    return double(c_.cql.alpha) * total / (double(b.B) * K);
  }

  // First layer of ensemble member e's head set.
  int ensemble_layer(int e) const { return l_.layer_index("ensemble." + std::to_string(e) + ".value.0"); }

  // Ensemble: (1/E)·Σ_e (1/B)·Σ_i w_i·(1/K)·Σ_k CE(m_ik, p_e(s_i, a_ik)); m = the C51 targets.
  double ensemble(const std::vector<double>& P, const RefBatch& b, const std::vector<double>& projected) const {
    const int K = static_cast<int>(c_.branches.size()), J = c_.atoms, E = c_.ensemble.k;
    const auto feat = features(P, b.states, b.B);
    double total = 0;
    for (int e = 0; e < E; ++e) {
      const auto lp = heads(P, feat, b.B, ensemble_layer(e));
      for (int i = 0; i < b.B; ++i)
        for (int k = 0; k < K; ++k) {
          double ce = 0;
          for (int j = 0; j < J; ++j)
            ce -= projected[(std::size_t(i) * K + k) * J + j] *
                  lp[(std::size_t(i) * actions_ + cum_[k] + b.actions[i * K + k]) * J + j];
          total += b.weights[i] * ce / K;
        }
    }
    return total / (double(b.B) * E);
  }

  // Per-sample spread: (1/K)·Σ_k population std over {main, members} of Q(s_i, a_ik).
  std::vector<double> ensemble_spread(const std::vector<double>& P, const RefBatch& b) const {
    const int K = static_cast<int>(c_.branches.size()), E = c_.ensemble.k;
    const auto feat = features(P, b.states, b.B);
    std::vector<std::vector<double>> lps{heads(P, feat, b.B, static_cast<int>(c_.trunk.size()))};
    for (int e = 0; e < E; ++e) lps.push_back(heads(P, feat, b.B, ensemble_layer(e)));
    std::vector<double> out(b.B, 0.0);
    for (int i = 0; i < b.B; ++i)
      for (int k = 0; k < K; ++k) {
        std::vector<double> q;
        for (const auto& lp : lps) q.push_back(q_of(lp, i, cum_[k] + b.actions[i * K + k]));
        double m = 0, v = 0;
        for (double x : q) m += x / q.size();
        for (double x : q) v += (x - m) * (x - m) / q.size();
        out[i] += std::sqrt(v) / K;
      }
    return out;
  }

  // The largest pre-activation, over rows and units, of the least live ReLU layer: the trunk's
  // layers and every head set's (main, then ensemble members) value and branch hidden layers.
  // At or below ~0 a layer is dead for the whole batch: finite differences then find no gradient
  // for it and the layer after it, a property of the tiny test net's draw, not of the code.
  double least_live_layer(const std::vector<double>& P, const std::vector<double>& x, int R) const {
    double least = INFINITY;
    const auto live = [&](const std::vector<double>& pre) {
      double mx = -INFINITY;
      for (double v : pre) mx = std::max(mx, v);
      least = std::min(least, mx);
    };
    std::vector<double> h = x;
    int width = c_.state_dim, layer = 0;
    for (int w : c_.trunk) {
      h = dense(P, layer++, h, R, width, false);
      live(h);
      for (double& v : h) v = std::max(0.0, v);
      width = w;
    }
    std::vector<int> sets{static_cast<int>(c_.trunk.size())};
    for (int e = 0; e < c_.ensemble.k; ++e) sets.push_back(ensemble_layer(e));
    for (int s : sets) {
      live(dense(P, s, h, R, width, false));
      for (std::size_t k = 0; k < c_.branches.size(); ++k) live(dense(P, s + 2 + 2 * static_cast<int>(k), h, R, width, false));
    }
    return least;
  }

  // IQN quantiles [R·N, A] of parameters P on features feat [R, F] at τ (row i·N + n). With
  // `least`, also least_live_layer's measure over IQN's two ReLU layers (embedding and hidden).
  std::vector<double> iqn_quantiles(const std::vector<double>& P, const std::vector<double>& feat, int R,
                                    const std::vector<double>& tau, double* least = nullptr) const {
    const int N = c_.iqn.n_tau, E = c_.iqn.embed_dim, F = c_.trunk.back(), L = l_.layer_index("iqn.embed");
    std::vector<double> cosv(std::size_t(R) * N * E), h(std::size_t(R) * N * F);
    const auto relu_noting = [&](std::vector<double> pre) {
      double mx = -INFINITY;
      for (double& v : pre) {
        mx = std::max(mx, v);
        v = std::max(0.0, v);
      }
      if (least) *least = std::min(*least, mx);
      return pre;
    };
    for (int r = 0; r < R * N; ++r)
      for (int e = 0; e < E; ++e) cosv[std::size_t(r) * E + e] = std::cos(M_PI * e * tau[r]);
    const auto phi = relu_noting(dense(P, L, cosv, R * N, E, false));
    for (int r = 0; r < R * N; ++r)
      for (int f = 0; f < F; ++f) h[std::size_t(r) * F + f] = feat[std::size_t(r / N) * F + f] * phi[std::size_t(r) * F + f];
    const auto hidden = relu_noting(dense(P, L + 1, h, R * N, F, false));
    return dense(P, L + 2, hidden, R * N, c_.head_hidden, false);
  }

  // least_live_layer's measure over IQN's ReLU layers on states x [R, state_dim] at τ.
  double iqn_least_live(const std::vector<double>& P, const std::vector<double>& x, int R,
                        const std::vector<double>& tau) const {
    double least = INFINITY;
    iqn_quantiles(P, features(P, x, R), R, tau, &least);
    return least;
  }

  // IQN quantile Huber loss (docs/kernels.md) with the given τ, τ′ and double-DQN actions.
  double iqn(const std::vector<double>& P, const std::vector<double>& T, const RefBatch& b,
             const std::vector<double>& tau, const std::vector<double>& tau_target, const std::vector<int>& best) const {
    const int K = static_cast<int>(c_.branches.size()), N = c_.iqn.n_tau, A = actions_;
    const double kappa = c_.iqn.kappa, gn = std::pow(double(c_.gamma), c_.n_step);
    const auto z = iqn_quantiles(P, features(P, b.states, b.B), b.B, tau);
    const auto zt = iqn_quantiles(T, features(T, b.next_states, b.B), b.B, tau_target);
    double total = 0;
    for (int i = 0; i < b.B; ++i) {
      double L = 0;
      for (int k = 0; k < K; ++k) {
        const int a = cum_[k] + b.actions[i * K + k], a2 = cum_[k] + best[i * K + k];
        for (int n = 0; n < N; ++n)
          for (int m = 0; m < N; ++m) {
            const double d = b.rewards[i] + gn * (1 - b.dones[i]) * zt[std::size_t(i * N + m) * A + a2] -
                             z[std::size_t(i * N + n) * A + a];
            const double hub = std::abs(d) <= kappa ? 0.5 * d * d : kappa * (std::abs(d) - 0.5 * kappa);
            L += std::abs(tau[i * N + n] - (d < 0 ? 1.0 : 0.0)) * hub / kappa / N / K;
          }
      }
      total += b.weights[i] * L / b.B;
    }
    return total;
  }

 private:
  std::vector<double> dense(const std::vector<double>& P, int layer, const std::vector<double>& x, int R, int in,
                            bool relu) const {
    const auto& d = l_.layers()[layer];
    std::vector<double> y(std::size_t(R) * d.out);
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < d.out; ++o) {
        double s = P[d.bias_offset + o];
        for (int i = 0; i < in; ++i) s += P[d.weight_offset + std::size_t(o) * d.in + i] * x[std::size_t(r) * in + i];
        y[std::size_t(r) * d.out + o] = relu ? std::max(0.0, s) : s;
      }
    return y;
  }

  const Config& c_;
  const ParamLayout& l_;
  std::vector<int> cum_;
  int actions_ = 0;
};

}  // namespace zs::test
