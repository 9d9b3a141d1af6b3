#include "kvasir/hf/generation_config.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "kvasir/hf/json_file.h"
#include "kvasir/util/error.h"

namespace kvasir::hf {

namespace {

using gguf::Value;

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

// A number field checked by `ok`, which is written so that NaN fails it; `expected` words it.
template <class Ok>
std::optional<double> number(const nlohmann::json& j, const std::string& file,
                             const std::string& name, Ok ok, const char* expected) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  const double x = json_float(j, file, name, std::nullopt);
  if (!ok(x)) fail("{}: field '{}' = {}: expected a number {}", file, name, it->dump(), expected);
  return x;
}

std::optional<int64_t> integer(const nlohmann::json& j, const std::string& file,
                               const std::string& name, int64_t lo, int64_t hi) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return json_int(j, file, name, std::nullopt, lo, hi);
}

}  // namespace

GenerationConfig parse_generation_config(const nlohmann::json& j, const std::string& file,
                                         int n_vocab) {
  if (!j.is_object()) fail("{}: expected a JSON object", file);
  GenerationConfig g;
  if (j.contains("do_sample") && !j["do_sample"].is_null())
    g.do_sample = json_bool(j, file, "do_sample", true);
  g.temperature = number(
      j, file, "temperature", [](double x) { return x >= 0; }, ">= 0");
  g.top_p = number(
      j, file, "top_p", [](double x) { return x > 0 && x <= 1; }, "in (0, 1]");
  g.min_p = number(
      j, file, "min_p", [](double x) { return x >= 0 && x <= 1; }, "in [0, 1]");
  g.repetition_penalty = number(
      j, file, "repetition_penalty",
      [](double x) { return x > 0 && x <= std::numeric_limits<float>::max(); }, "> 0 (1 = off)");
  g.top_k = integer(j, file, "top_k", 0, kIntMax);
  g.max_new_tokens = integer(j, file, "max_new_tokens", 1, kIntMax);
  g.max_length = integer(j, file, "max_length", 1, kIntMax);
  if (auto v = integer(j, file, "bos_token_id", 0, n_vocab - 1))
    g.bos_token_id = static_cast<int32_t>(*v);
  if (auto v = integer(j, file, "pad_token_id", std::numeric_limits<int32_t>::min(), kIntMax))
    g.pad_token_id = static_cast<int32_t>(*v);

  const auto e = j.find("eos_token_id");
  if (e != j.end() && !e->is_null()) {
    const std::vector<nlohmann::json> ids =
        e->is_array() ? e->get<std::vector<nlohmann::json>>() : std::vector<nlohmann::json>{*e};
    for (const nlohmann::json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_vocab)
        fail("{}: field 'eos_token_id' = {}: expected a token id in 0 .. {} or a list of them",
             file, e->dump(), n_vocab - 1);
      const auto t = static_cast<int32_t>(id.get<int64_t>());
      if (std::find(g.eos_token_ids.begin(), g.eos_token_ids.end(), t) == g.eos_token_ids.end())
        g.eos_token_ids.push_back(t);
    }
  }
  return g;
}

std::optional<GenerationConfig> read_generation_config(const std::string& folder, int n_vocab) {
  const std::string file = (std::filesystem::path(folder) / "generation_config.json").string();
  const auto j = read_json_file(file, /*must_exist=*/false);
  if (!j) return std::nullopt;
  return parse_generation_config(*j, file, n_vocab);
}

std::vector<std::pair<std::string, Value>> generation_metadata(const GenerationConfig& g) {
  std::vector<std::pair<std::string, Value>> m;
  auto f32 = [](double x) { return Value::f32(static_cast<float>(x)); };
  if (g.do_sample == false) {
    m.emplace_back("general.sampling.temp", f32(0));
  } else {
    if (g.temperature) m.emplace_back("general.sampling.temp", f32(*g.temperature));
    if (g.top_k)
      m.emplace_back("general.sampling.top_k", Value::i32(static_cast<int32_t>(*g.top_k)));
    if (g.top_p) m.emplace_back("general.sampling.top_p", f32(*g.top_p));
    if (g.min_p) m.emplace_back("general.sampling.min_p", f32(*g.min_p));
  }
  // A logits processor in transformers, applied in greedy decoding too.
  if (g.repetition_penalty) {
    m.emplace_back("general.sampling.penalty_repeat", f32(*g.repetition_penalty));
    m.emplace_back("general.sampling.penalty_last_n", Value::i32(-1));
  }
  if (g.max_new_tokens)
    m.emplace_back("general.sampling.kvasir.max_tokens",
                   Value::u32(static_cast<uint32_t>(*g.max_new_tokens)));
  if (!g.eos_token_ids.empty()) {
    std::vector<Value> ids;
    for (int32_t id : g.eos_token_ids) ids.push_back(Value::u32(static_cast<uint32_t>(id)));
    m.emplace_back("tokenizer.ggml.kvasir.eog_token_ids",
                   Value::array(gguf::ValueType::UINT32, std::move(ids)));
  }
  return m;
}

}  // namespace kvasir::hf
