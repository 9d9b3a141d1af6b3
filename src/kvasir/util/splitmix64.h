// splitmix64 (Steele, Lea, Flood 2014; the seeding generator of xoshiro): tiny, fast and
// identical everywhere, so a seed names the same synthetic model or test matrix on any machine.
// Written here because std's engines' distributions are not specified bit for bit across
// standard libraries, and the fixtures made by other programs (tests/fixtures/*/harness.c)
// replay the same stream.
#pragma once

#include <cstdint>

namespace kvasir {

// Advances `state` and returns the next 64-bit output.
inline uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct SplitMix64 {
  uint64_t state;
  uint64_t next() { return splitmix64_next(state); }
  // Uniform in [-1, 1) on a 2^-52 grid, rounded to float.
  float uniform() {
    return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0);
  }
};

}  // namespace kvasir
