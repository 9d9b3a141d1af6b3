#include "kvasir/sampling/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace kvasir {
namespace {

// Expects validate() to fail with a message that starts with the field's name.
void expect_invalid(const std::function<void(SamplingParams&)>& edit, const std::string& field,
                    int32_t n_vocab = 0) {
  SamplingParams p;
  edit(p);
  const auto err = p.validate(n_vocab);
  ASSERT_TRUE(err.has_value()) << "expected an error for " << field;
  EXPECT_EQ(err->rfind(field, 0), 0u) << *err;
}

TEST(SamplingParams, DefaultsAreValid) {
  SamplingParams p;
  EXPECT_FALSE(p.validate().has_value());
  EXPECT_FALSE(p.validate(32000).has_value());
  EXPECT_FALSE(p.is_greedy());
  EXPECT_FALSE(p.penalties_enabled());
}

TEST(SamplingParams, BoundaryValuesAreValid) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  p.repetition_penalty = 1e-3f;
  p.penalty_last_n = 0;
  p.max_tokens = 1;
  p.logprobs = true;
  p.top_logprobs = 20;
  p.logit_bias = {{0, -100.0f}, {9, 100.0f}, {5, -std::numeric_limits<float>::infinity()}};
  p.stop_token_ids = {0, 9};
  EXPECT_FALSE(p.validate(10).has_value()) << *p.validate(10);
  EXPECT_TRUE(p.is_greedy());
}

TEST(SamplingParams, RejectsOutOfRangeValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  expect_invalid([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  expect_invalid([&](SamplingParams& p) { p.temperature = nan; }, "temperature");
  expect_invalid([&](SamplingParams& p) { p.temperature = inf; }, "temperature");
  expect_invalid([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  expect_invalid([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  expect_invalid([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  expect_invalid([&](SamplingParams& p) { p.top_p = nan; }, "top_p");
  expect_invalid([](SamplingParams& p) { p.min_p = -0.01f; }, "min_p");
  expect_invalid([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  expect_invalid([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  expect_invalid([](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty");
  expect_invalid([&](SamplingParams& p) { p.repetition_penalty = inf; }, "repetition_penalty");
  expect_invalid([](SamplingParams& p) { p.frequency_penalty = 2.5f; }, "frequency_penalty");
  expect_invalid([&](SamplingParams& p) { p.frequency_penalty = nan; }, "frequency_penalty");
  expect_invalid([](SamplingParams& p) { p.presence_penalty = -2.5f; }, "presence_penalty");
  expect_invalid([](SamplingParams& p) { p.penalty_last_n = -2; }, "penalty_last_n");
  expect_invalid([](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens");
  expect_invalid([](SamplingParams& p) { p.max_tokens = -5; }, "max_tokens");
  expect_invalid([](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop[1]");
  expect_invalid([](SamplingParams& p) { p.stop_token_ids = {-1}; }, "stop_token_ids[0]");
  expect_invalid([](SamplingParams& p) { p.stop_token_ids = {3, 10}; }, "stop_token_ids[1]", 10);
  expect_invalid([](SamplingParams& p) { p.logprobs = true, p.top_logprobs = 21; }, "top_logprobs");
  expect_invalid([](SamplingParams& p) { p.logprobs = true, p.top_logprobs = -1; }, "top_logprobs");
  expect_invalid([](SamplingParams& p) { p.top_logprobs = 3; }, "top_logprobs");
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{10, 1.0f}}; }, "logit_bias", 10);
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias");
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{3, 100.5f}}; }, "logit_bias[3]");
  expect_invalid([&](SamplingParams& p) { p.logit_bias = {{3, inf}}; }, "logit_bias[3]");
  expect_invalid([&](SamplingParams& p) { p.logit_bias = {{3, nan}}; }, "logit_bias[3]");
}

TEST(SamplingParams, MessageSaysWhatWasExpectedAndWhatCame) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_EQ(*p.validate(), "top_p: must be in (0, 1] (1 = disabled), got 1.5");
}

TEST(SamplingParams, PenaltiesEnabled) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  EXPECT_TRUE(p.penalties_enabled());
  p.penalty_last_n = 0;  // an empty window turns them off
  EXPECT_FALSE(p.penalties_enabled());
  p.penalty_last_n = 64;
  p.presence_penalty = 0.0f;
  p.repetition_penalty = 1.1f;
  EXPECT_TRUE(p.penalties_enabled());
}

TEST(SamplingParams, StopsOnToken) {
  SamplingParams p;
  p.stop_token_ids = {7};
  const std::vector<int32_t> eos = {2, 3};
  EXPECT_TRUE(p.stops_on_token(2, eos));
  EXPECT_TRUE(p.stops_on_token(3, eos));
  EXPECT_TRUE(p.stops_on_token(7, eos));
  EXPECT_FALSE(p.stops_on_token(4, eos));
  p.ignore_eos = true;
  EXPECT_FALSE(p.stops_on_token(2, eos));
  EXPECT_TRUE(p.stops_on_token(7, eos));  // explicit stop ids still stop
}

}  // namespace
}  // namespace kvasir
