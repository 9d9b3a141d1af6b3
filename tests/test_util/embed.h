// embed(): one embedding request through an Engine, waited for; its vector (empty if the engine
// ended it with an error). Needs kvasir_engine.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kvasir/engine.h"

namespace kvasir::test_util {

inline std::vector<float> embed(Engine& engine, const std::vector<int32_t>& tokens,
                                const EmbeddingParams& params) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<float> v;
  bool done = false;
  GenerateRequest r;
  r.prompt = tokens;
  r.embedding = params;
  engine.submit(std::move(r), [&](const RequestOutput& o) {
    if (!o.finished) return;
    std::lock_guard lk(mu);
    v = o.embedding;
    done = true;
    cv.notify_all();
  });
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done; });
  return v;
}

}  // namespace kvasir::test_util
