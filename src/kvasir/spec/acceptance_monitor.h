// AcceptanceMonitor: the engine's running judgment of whether speculation pays on the current
// workload.
//
// Every verified proposal is recorded (draft tokens proposed, tokens accepted). The acceptance
// rate over the last `window` proposals (accepted / proposed draft tokens, as vLLM reports it) is
// compared with `warn_below`: once the window is full and the rate is below it, the monitor warns
// (counted in warnings(); the engine logs it) and enters fallback, where speculate() answers
// false: the engine decodes plainly. Every `reprobe_steps` steps in fallback it probes: speculate()
// answers true until `probe` new proposals are recorded; if their acceptance reaches warn_below
// the monitor leaves fallback, else it waits another reprobe_steps. A probe's cost is bounded by
// probe / reprobe_steps of the steps, so a workload that never accepts stays within a few percent
// of plain decoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvasir {

struct AcceptanceMonitorConfig {
  double warn_below = 0.6;  // acceptance rate (accepted / proposed draft tokens)
  int window = 64;          // proposals judged together
  int reprobe_steps = 512;  // plain steps between probes while in fallback
  int probe = 16;           // proposals a probe judges
};

class AcceptanceMonitor {
 public:
  // Throws kvasir::Error for a non-positive window, probe or reprobe_steps, or warn_below
  // outside [0, 1].
  explicit AcceptanceMonitor(const AcceptanceMonitorConfig& cfg);

  // Whether this step speculates; call once per engine step.
  bool speculate();
  // One verified proposal. Returns true when this record made the monitor warn and fall back.
  bool record(int proposed, int accepted);

  bool fallback() const { return fallback_; }
  // Acceptance over the current window (1 while it is empty).
  double window_rate() const;
  uint64_t warnings() const { return warnings_; }
  uint64_t probes() const { return probes_; }
  // Per-token acceptance estimate over the window for the auto-K model: accepted / (accepted +
  // rejections), a proposal that was cut short counting one rejection (the maximum-likelihood
  // estimate for independent acceptances). 1 while nothing was rejected.
  double token_acceptance() const;
  const AcceptanceMonitorConfig& config() const { return cfg_; }

 private:
  struct Rec {
    int proposed, accepted;
  };
  void clear_window();

  AcceptanceMonitorConfig cfg_;
  std::vector<Rec> ring_;  // window records, a ring of cfg_.window
  size_t head_ = 0, n_ = 0;
  int64_t sum_proposed_ = 0, sum_accepted_ = 0, sum_rejections_ = 0;
  bool fallback_ = false;
  bool probing_ = false;
  int steps_since_probe_ = 0;
  int probe_records_ = 0;
  int64_t probe_proposed_ = 0, probe_accepted_ = 0;
  uint64_t warnings_ = 0, probes_ = 0;
};

}  // namespace kvasir
