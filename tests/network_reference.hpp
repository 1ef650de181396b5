// A naive double-precision BDQ-C51 network and C51 double-DQN loss, written from the math in
// DESIGN §2/§3 and issue 4's "Semantics, exactly", sharing nothing with the device code but the
// parameter layout's offsets. The reference the device network and loss are tested against.
#pragma once
#include <cmath>
#include <vector>

#include "config.hpp"
#include "param_layout.hpp"

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

  // log-probabilities [R, A, atoms] of the network with parameters P (flat, layout offsets).
  std::vector<double> forward(const std::vector<double>& P, const std::vector<double>& x, int R) const {
    std::vector<double> h = x;
    int width = c_.state_dim, layer = 0;
    for (int w : c_.trunk) {
      h = dense(P, layer++, h, R, width, true);
      width = w;
    }
    const auto feat = h;
    const int F = width;
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
    for (int i = 0; i < B; ++i) {
      double L = 0;
      for (int k = 0; k < K; ++k) {
        const int c0 = cum_[k], n = c_.branches[k];
        int best = 0;
        double qb = -INFINITY;
        for (int a = 0; a < n; ++a) {
          double q = 0;
          for (int j = 0; j < J; ++j) q += std::exp(lp2[(std::size_t(i) * A + c0 + a) * J + j]) * (c_.v_min + j * dz);
          if (q > qb) { qb = q; best = a; }
        }
        out.best[i * K + k] = best;
        std::vector<double> m(J, 0.0);
        for (int j = 0; j < J; ++j) {
          const double p = std::exp(lt[(std::size_t(i) * A + c0 + best) * J + j]);
          const double tz = std::min<double>(c_.v_max, std::max<double>(c_.v_min, b.rewards[i] + gn * (1 - b.dones[i]) * (c_.v_min + j * dz)));
          const double pos = (tz - c_.v_min) / dz;
          const double lo = std::floor(pos), hi = std::ceil(pos);
          if (lo == hi) m[int(lo)] += p;
          else { m[int(lo)] += p * (hi - pos); m[int(hi)] += p * (pos - lo); }
        }
        double ce = 0;
        for (int j = 0; j < J; ++j) ce -= m[j] * lp[(std::size_t(i) * A + c0 + b.actions[i * K + k]) * J + j];
        L += ce / K;
      }
      out.priorities[i] = L;
      out.loss += b.weights[i] * L / B;
    }
    return out;
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
