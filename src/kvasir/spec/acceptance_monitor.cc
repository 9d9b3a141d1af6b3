#include "kvasir/spec/acceptance_monitor.h"

#include "kvasir/util/error.h"

namespace kvasir {

AcceptanceMonitor::AcceptanceMonitor(const AcceptanceMonitorConfig& cfg) : cfg_(cfg) {
  if (cfg.window <= 0)
    fail("speculation: the acceptance window must be positive, got {}", cfg.window);
  if (cfg.probe <= 0) fail("speculation: the probe length must be positive, got {}", cfg.probe);
  if (cfg.reprobe_steps <= 0)
    fail("speculation: the re-probe interval must be positive, got {}", cfg.reprobe_steps);
  if (!(cfg.warn_below >= 0 && cfg.warn_below <= 1))
    fail("speculation: the acceptance warning threshold must be in [0, 1], got {}", cfg.warn_below);
  ring_.resize(static_cast<size_t>(cfg.window));
}

void AcceptanceMonitor::clear_window() {
  head_ = n_ = 0;
  sum_proposed_ = sum_accepted_ = sum_rejections_ = 0;
}

bool AcceptanceMonitor::speculate() {
  if (!fallback_ || probing_) return true;
  if (++steps_since_probe_ >= cfg_.reprobe_steps) {
    probing_ = true;
    ++probes_;
    probe_records_ = 0;
    probe_proposed_ = probe_accepted_ = 0;
    return true;
  }
  return false;
}

bool AcceptanceMonitor::record(int proposed, int accepted) {
  if (proposed <= 0) return false;
  if (fallback_) {
    if (!probing_) return false;  // a step that began before the fallback
    probe_proposed_ += proposed;
    probe_accepted_ += accepted;
    if (++probe_records_ < cfg_.probe) return false;
    probing_ = false;
    steps_since_probe_ = 0;
    if (static_cast<double>(probe_accepted_) >=
        cfg_.warn_below * static_cast<double>(probe_proposed_)) {
      fallback_ = false;  // the workload changed: judge it afresh
      clear_window();
    }
    return false;
  }
  if (n_ == ring_.size()) {
    const Rec& old = ring_[head_];
    sum_proposed_ -= old.proposed;
    sum_accepted_ -= old.accepted;
    sum_rejections_ -= old.accepted < old.proposed ? 1 : 0;
  } else {
    ++n_;
  }
  ring_[head_] = {proposed, accepted};
  head_ = (head_ + 1) % ring_.size();
  sum_proposed_ += proposed;
  sum_accepted_ += accepted;
  sum_rejections_ += accepted < proposed ? 1 : 0;
  if (n_ == ring_.size() && window_rate() < cfg_.warn_below) {
    fallback_ = true;
    probing_ = false;
    steps_since_probe_ = 0;
    ++warnings_;
    return true;
  }
  return false;
}

double AcceptanceMonitor::window_rate() const {
  return sum_proposed_ > 0 ? static_cast<double>(sum_accepted_) / static_cast<double>(sum_proposed_)
                           : 1.0;
}

double AcceptanceMonitor::token_acceptance() const {
  const int64_t trials = sum_accepted_ + sum_rejections_;
  return trials > 0 ? static_cast<double>(sum_accepted_) / static_cast<double>(trials) : 1.0;
}

}  // namespace kvasir
