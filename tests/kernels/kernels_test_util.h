// Helpers for the kernel tests: for_each_target(fn), which runs fn once per compiled SIMD target
// this CPU supports (AVX-512, AVX2, scalar), each under a SCOPED_TRACE naming it.
#pragma once

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <cstdint>
#include <functional>

namespace kvasir::cpu {

inline void for_each_target(const std::function<void()>& fn) {
  for (int64_t t : {int64_t{HWY_AVX3}, int64_t{HWY_AVX2}, int64_t{HWY_SCALAR}}) {
    if ((hwy::SupportedTargets() & t) == 0 && t != HWY_SCALAR) continue;
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace kvasir::cpu
