#include "kvasir/sampling/penalty_window.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>
#include <vector>

namespace kvasir {
namespace {

using Counts = std::map<int32_t, std::pair<int32_t, int32_t>>;  // token -> (all, output)

// Brute force: count the last n (or all) entries of the history.
Counts reference(const std::vector<std::pair<int32_t, bool>>& history, int32_t last_n) {
  Counts c;
  if (last_n == 0) return c;
  size_t first = 0;
  if (last_n > 0 && history.size() > static_cast<size_t>(last_n)) first = history.size() - last_n;
  for (size_t i = first; i < history.size(); ++i) {
    auto& e = c[history[i].first];
    ++e.first;
    if (history[i].second) ++e.second;
  }
  return c;
}

Counts collect(const PenaltyWindow& w) {
  Counts c;
  w.for_each([&](const PenaltyWindow::Entry& e) {
    EXPECT_EQ(c.count(e.token), 0u) << "token listed twice: " << e.token;
    c[e.token] = {e.count_all, e.count_output};
  });
  return c;
}

TEST(PenaltyWindow, HandCountedWindow) {
  PenaltyWindow w(3);
  w.push(5, false);
  w.push(7, true);
  w.push(5, true);
  EXPECT_EQ(w.find(5).count_all, 2);
  EXPECT_EQ(w.find(5).count_output, 1);
  EXPECT_EQ(w.find(7).count_all, 1);
  w.push(9, true);  // the prompt's 5 leaves the window
  EXPECT_EQ(w.find(5).count_all, 1);
  EXPECT_EQ(w.find(5).count_output, 1);
  w.push(9, true);  // 7 leaves
  EXPECT_EQ(w.find(7).count_all, 0);
  EXPECT_EQ(w.distinct(), 2);
  EXPECT_EQ(w.size(), 3);
}

TEST(PenaltyWindow, ZeroWindowCountsNothing) {
  PenaltyWindow w(0);
  w.push(1, true);
  EXPECT_EQ(w.distinct(), 0);
  EXPECT_EQ(w.find(1).count_all, 0);
}

TEST(PenaltyWindow, MatchesBruteForceOnRandomStreams) {
  std::mt19937 gen(7);
  for (int32_t last_n : {-1, 1, 2, 5, 17, 64, 300}) {
    for (int32_t vocab : {3, 40, 5000}) {  // few tokens (many repeats) to many (table growth)
      PenaltyWindow w(last_n);
      std::vector<std::pair<int32_t, bool>> history;
      std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
      for (int step = 0; step < 700; ++step) {
        // Token ids spread over a large range too, so hash collisions and wrap-around happen.
        const int32_t t = tok(gen) * (vocab == 5000 ? 37 : 1);
        const bool out = step >= 100;
        w.push(t, out);
        history.emplace_back(t, out);
        if (step % 7 == 0 || step == 699) {
          ASSERT_EQ(collect(w), reference(history, last_n))
              << "last_n=" << last_n << " vocab=" << vocab << " step=" << step;
          const auto ref = reference(history, last_n);
          ASSERT_EQ(w.distinct(), static_cast<int32_t>(ref.size()));
          for (const auto& [token, counts] : ref) {
            ASSERT_EQ(w.find(token).count_all, counts.first);
            ASSERT_EQ(w.find(token).count_output, counts.second);
          }
        }
      }
    }
  }
}

TEST(PenaltyWindow, ClearEmpties) {
  PenaltyWindow w(4);
  for (int i = 0; i < 10; ++i) w.push(i, true);
  w.clear();
  EXPECT_EQ(w.distinct(), 0);
  EXPECT_EQ(w.size(), 0);
  EXPECT_TRUE(collect(w).empty());
  w.push(3, false);
  EXPECT_EQ(w.find(3).count_all, 1);
}

}  // namespace
}  // namespace kvasir
