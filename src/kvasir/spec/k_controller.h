// KController: chooses the number of draft tokens K per step for `--spec-k auto`.
//
// With a per-token acceptance probability a (AcceptanceMonitor::token_acceptance), a proposal of
// K tokens yields E(K) = (1 - a^(K+1)) / (1 - a) tokens per target pass (K + 1 when a = 1). Its
// cost, in units of a plain decode step, is C(K) = T(1 + K) / T(1) + K * d, where T(n) is the
// target's step time with n tokens per sequence and d the proposer's time per draft token, both
// measured: the controller fits T(n) = t0 + t1 * n by least squares over recent steps (with
// exponential forgetting) and keeps a moving average of the proposer's cost. The chosen K
// maximizes E(K) / C(K) over 1..k_max (whether speculating at all pays is the AcceptanceMonitor's
// call: it falls back to plain decoding when acceptance is low, and keeps probing). Until the
// model has measurements (a few steps of each kind) it answers `k_initial`.
#pragma once

namespace kvasir {

class KController {
 public:
  KController(int k_initial, int k_max);

  // A target step that computed `tokens_per_seq` tokens per decoding sequence on average (1 for
  // plain decode, 1 + K with proposals) in `seconds`.
  void record_target_step(double tokens_per_seq, double seconds);
  // The proposer spent `seconds` producing `tokens_per_seq` draft tokens per sequence.
  void record_proposer(double tokens_per_seq, double seconds);

  // The K to use next, given the per-token acceptance estimate.
  int choose(double token_acceptance) const;
  // Expected speedup over plain decoding of K draft tokens (tests, metrics).
  double expected_speedup(int k, double token_acceptance) const;
  int k_max() const { return k_max_; }

 private:
  bool fitted() const;
  int k_initial_, k_max_;
  // Weighted least-squares sums for T(n) = t0 + t1 n.
  double sw_ = 0, sn_ = 0, st_ = 0, snn_ = 0, snt_ = 0;
  double n_min_ = 1e30, n_max_ = -1e30;
  int steps_ = 0;
  double draft_cost_ = 0;  // seconds per draft token per sequence (moving average)
  int draft_samples_ = 0;
};

}  // namespace kvasir
