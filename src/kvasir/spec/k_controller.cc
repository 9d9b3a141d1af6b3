#include "kvasir/spec/k_controller.h"

#include <algorithm>
#include <cmath>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {
// Forgetting factor per recorded step: about the last 200 steps count.
constexpr double kDecay = 0.995;
constexpr double kDraftAlpha = 0.05;  // moving average weight of a new proposer measurement
constexpr int kMinSteps = 8;
}  // namespace

KController::KController(int k_initial, int k_max) : k_initial_(k_initial), k_max_(k_max) {
  if (k_max < 1) fail("speculation: the largest K must be at least 1, got {}", k_max);
  if (k_initial < 0 || k_initial > k_max)
    fail("speculation: the initial K must be in [0, {}], got {}", k_max, k_initial);
}

void KController::record_target_step(double n, double t) {
  if (!(t > 0) || !(n > 0)) return;
  sw_ = sw_ * kDecay + 1;
  sn_ = sn_ * kDecay + n;
  st_ = st_ * kDecay + t;
  snn_ = snn_ * kDecay + n * n;
  snt_ = snt_ * kDecay + n * t;
  n_min_ = std::min(n_min_, n);
  n_max_ = std::max(n_max_, n);
  ++steps_;
}

void KController::record_proposer(double n, double t) {
  if (!(n > 0) || !(t >= 0)) return;
  const double per_token = t / n;
  draft_cost_ =
      draft_samples_ == 0 ? per_token : (1 - kDraftAlpha) * draft_cost_ + kDraftAlpha * per_token;
  ++draft_samples_;
}

bool KController::fitted() const {
  // Two distinct token counts are needed to separate t0 from t1.
  return steps_ >= kMinSteps && draft_samples_ > 0 && n_max_ - n_min_ >= 1;
}

double KController::expected_speedup(int k, double a) const {
  if (k <= 0) return 1.0;
  a = std::clamp(a, 0.0, 1.0);
  const double e = a >= 1 ? k + 1.0 : (1 - std::pow(a, k + 1)) / (1 - a);
  double t0 = 1, t1 = 0, d = 0;
  if (fitted()) {
    const double det = sw_ * snn_ - sn_ * sn_;
    if (det > 0) {
      t1 = std::max(0.0, (sw_ * snt_ - sn_ * st_) / det);
      t0 = std::max(1e-12, (st_ - t1 * sn_) / sw_);
    }
    d = draft_cost_;
  }
  const double plain = t0 + t1;
  const double cost = (t0 + t1 * (1 + k) + k * d) / plain;
  return e / cost;
}

int KController::choose(double a) const {
  if (!fitted()) return k_initial_;
  int best = 1;
  double best_speedup = expected_speedup(1, a);
  for (int k = 2; k <= k_max_; ++k) {
    const double s = expected_speedup(k, a);
    if (s > best_speedup * 1.001) {
      best = k;
      best_speedup = s;
    }
  }
  return best;
}

}  // namespace kvasir
