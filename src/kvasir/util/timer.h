// Monotonic wall-clock timing helpers.
#pragma once

#include <chrono>

namespace kvasir {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace kvasir
