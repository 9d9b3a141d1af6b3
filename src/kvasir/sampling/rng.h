// Rng: the per-request random number generator. The engine is std::mt19937_64, whose output
// sequence for a given seed is fixed by the C++ standard; uniform() turns one 64-bit output into a
// double in [0, 1) by hand (top 53 bits * 2^-53) instead of std::uniform_real_distribution, whose
// algorithm is implementation-defined. So the same seed gives the same draws on every machine,
// compiler and standard library.
#pragma once

#include <cstdint>
#include <random>

namespace kvasir {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t next() { return engine_(); }
  // Uniform in [0, 1), a multiple of 2^-53.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // A seed from the operating system's entropy source, for requests that did not set one.
  static uint64_t random_seed() {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace kvasir
