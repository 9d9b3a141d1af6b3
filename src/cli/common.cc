// Input checks shared by the subcommands (see common.h).
#include "common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "kvasir/chat/chat_template.h"
#include "kvasir/engine/key_calibration.h"
#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/sampling/sampling_params.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

namespace {

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

void check_input_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) fail("{}: cannot read the {} (no such file)", path, what);
  if (std::filesystem::is_directory(st)) fail("{}: cannot read the {} (a directory)", path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the {} ({})", path, what, std::strerror(errno));
}

void check_model_path(const std::string& path, std::string_view what) {
  if (hf::is_hf_folder(path)) return;  // a Hugging Face folder; its files are checked at load
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail(
        "{}: cannot read the {} (a folder without config.json: expected a GGUF file or a "
        "Hugging Face model folder)",
        path, what);
  check_input_file(path, what);
}

std::string read_input_file(const std::string& path, std::string_view what) {
  check_input_file(path, what);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<size_t> find_non_text(std::string_view s, bool prefix, std::string* why) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) {
      if (why) *why = "a NUL byte";
      return i;
    }
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Well-formed UTF-8 (Unicode 15, table 3-7): no overlongs, surrogates or values past 10FFFF.
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      if (why) *why = fmt::format("invalid UTF-8 (byte 0x{:02X})", c);
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) {
        if (prefix) return std::nullopt;  // cut by the limit: the rest was not read
        if (why) *why = "invalid UTF-8 (a character cut at the end)";
        return i;
      }
      const auto d = static_cast<unsigned char>(s[i + k]);
      if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) {
        if (why) *why = fmt::format("invalid UTF-8 (byte 0x{:02X} after 0x{:02X})", d, c);
        return i;
      }
    }
    i += n + 1;
  }
  return std::nullopt;
}

void check_text_file(const std::string& path, std::string_view what, size_t limit) {
  check_input_file(path, what);
  std::ifstream in(path, std::ios::binary);
  std::string buf(limit + 1, '\0');
  in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
  buf.resize(static_cast<size_t>(in.gcount()));
  const bool prefix = buf.size() > limit;
  if (prefix) buf.resize(limit);
  std::string why;
  if (auto at = find_non_text(buf, prefix, &why))
    fail("{}: the {} is not UTF-8 text ({} at byte {})", path, what, why, *at);
}

std::string ChatTemplateChoice::source(bool add_bos) const {
  if (builtin) return chat::builtin_template_source(*builtin, add_bos);
  return text;
}

std::string ChatTemplateChoice::label() const {
  if (builtin) return fmt::format("{} (built-in)", builtin->name);
  return path;
}

ChatTemplateChoice choose_chat_template(const std::string& value, std::string_view flag) {
  ChatTemplateChoice c;
  if (value.empty()) return c;
  std::error_code ec;
  if (std::filesystem::exists(value, ec)) {  // a file wins over a built-in of the same name
    c.path = value;
    c.text = read_input_file(value, "chat template");
    if (c.text.empty()) fail("{}: the chat template file is empty", value);
    try {
      chat::ChatTemplate::parse(c.text);
    } catch (const chat::TemplateError& e) {
      fail("{}: {}", value, e.what());
    }
    return c;
  }
  c.builtin = chat::find_builtin_template(value);
  if (!c.builtin)
    fail("{} {}: neither a file nor a built-in template (built-in: {})", flag, value,
         chat::builtin_template_names());
  return c;
}

server::ApiKeys collect_api_keys(const std::vector<std::string>& keys, const std::string& file) {
  // The file's keys first, so their labels (key1, ...) are the server's with the file alone.
  server::ApiKeys all = file.empty() ? server::ApiKeys() : server::ApiKeys::load(file);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (trim(keys[i]).empty()) fail("--api-key: key {} is empty", i + 1);
    all.add(keys[i]);
  }
  return all;
}

void add_kv_type_options(CLI::App* cmd, KVTypeOptions& o) {
  const std::string names(kv_dtype_choices());
  cmd->add_option("--kv-dtype,--kv-type", o.kv,
                  "KV cache dtype of K and V: " + names + " (default f16)");
  cmd->add_option("--cache-type-k", o.k,
                  "KV cache dtype of K only (also -ctk; default: --kv-dtype)");
  cmd->add_option("--cache-type-v", o.v,
                  "KV cache dtype of V only (also -ctv; default: --kv-dtype)");
}

void add_spec_options(CLI::App* cmd, SpecOptions& o) {
  cmd->add_option("--draft,--model-draft", o.draft,
                  "Draft model for speculative decoding (GGUF file or Hugging Face folder with "
                  "the target's vocabulary; implies --spec draft)");
  cmd->add_option("--spec", o.method,
                  "Speculative decoding: none (default), draft (needs --draft) or ngram (prompt "
                  "lookup: no draft model)");
  cmd->add_option("--spec-k,--draft-max", o.k,
                  "Draft tokens per step, or auto (chosen from measured acceptance and cost; "
                  "default 4)");
  cmd->add_option("--spec-ngram-min", o.ngram_min,
                  "Shortest n-gram the lookup matches (default 1)");
  cmd->add_option("--spec-ngram-max", o.ngram_max, "Longest n-gram the lookup matches (default 4)");
  cmd->add_option("--spec-warn-acceptance", o.warn_acceptance,
                  "Warn and decode plainly while acceptance stays below this rate (default 0.6; "
                  "0: never)");
}

SpecConfig resolve_spec(const SpecOptions& o) {
  SpecConfig c;
  std::string m = o.method;
  if (m.empty()) m = o.draft.empty() ? "none" : "draft";
  if (m == "none") {
    c.method = SpecMethod::kNone;
  } else if (m == "draft") {
    c.method = SpecMethod::kDraft;
  } else if (m == "ngram") {
    c.method = SpecMethod::kNgram;
  } else {
    fail("--spec: expected none, draft or ngram, got '{}'", m);
  }
  if (c.method == SpecMethod::kDraft && o.draft.empty())
    fail("--spec draft needs a draft model: pass --draft FILE");
  if (c.method != SpecMethod::kDraft && !o.draft.empty())
    fail("--draft is given but --spec is {}: drop one of them", m);
  if (!o.draft.empty()) check_model_path(o.draft, "draft model");
  if (o.k == "auto") {
    c.k = 0;
  } else {
    size_t used = 0;
    int k = 0;
    try {
      k = std::stoi(o.k, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != o.k.size() || k < 1 || k > 32)
      fail("--spec-k: expected a number of draft tokens in 1..32 or auto, got '{}'", o.k);
    c.k = k;
  }
  if (o.ngram_min < 1 || o.ngram_max < o.ngram_min || o.ngram_max > 64)
    fail("--spec-ngram-min/--spec-ngram-max: expected 1 <= min <= max <= 64, got {} and {}",
         o.ngram_min, o.ngram_max);
  c.ngram_min = o.ngram_min;
  c.ngram_max = o.ngram_max;
  if (!(o.warn_acceptance >= 0 && o.warn_acceptance <= 1))
    fail("--spec-warn-acceptance: expected a rate in [0, 1], got {}", o.warn_acceptance);
  c.warn_acceptance = o.warn_acceptance;
  return c;
}

void load_draft(const SpecOptions& o, SpecConfig& cfg, std::unique_ptr<Model>& holder) {
  if (cfg.method != SpecMethod::kDraft) return;
  holder = Model::load(o.draft);
  cfg.draft = holder.get();
}

void add_kv_calib_options(CLI::App* cmd, KVCalibOptions& o) {
  cmd->add_option("--kv-calib", o.text,
                  "Key transform of quantized keys (int8, fp8, int4 K): calibrated on 'builtin' "
                  "(the built-in text, the default) or a text file, or 'none': a mean-key shift "
                  "that turns with RoPE and, for int4, a channel scale");
}

void check_kv_calib(const KVCalibOptions& o) {
  if (!o.text.empty() && o.text != "builtin" && o.text != "none")
    check_text_file(o.text, "--kv-calib text file");
}

namespace {
// Whether `o` asks for a transform of keys stored as k (none, or the default for f16/f32 keys:
// no); an explicit text for f16/f32 keys says yes, and is refused by resolve_key_transform.
bool wants_key_transform(const KVCalibOptions& o, KVDType k) {
  return o.text != "none" && (!o.text.empty() || key_transform_kind(k) != KeyTransformKind::kNone);
}
}  // namespace

std::shared_ptr<const KeyTransform> resolve_key_transform(const KVCalibOptions& o,
                                                          const Model& model,
                                                          const Tokenizer& tokenizer,
                                                          ThreadPool& pool, KVDType k) {
  check_kv_calib(o);
  if (!wants_key_transform(o, k)) return nullptr;
  if (key_transform_kind(k) == KeyTransformKind::kNone)
    fail(
        "--kv-calib: the keys are stored as {}, which takes no transform (it is for int8, fp8 and "
        "int4 keys: --kv-dtype or --cache-type-k)",
        kv_dtype_name(k));
  if (o.text.empty() || o.text == "builtin") return calibrate_key_transform(model, pool, k);
  const std::vector<int32_t> ids =
      tokenizer.encode(read_input_file(o.text, "--kv-calib text file"), false, false);
  if (ids.empty()) fail("--kv-calib {}: the file has no text to calibrate on", o.text);
  const int32_t bos = tokenizer.add_bos() ? tokenizer.bos_id() : -1;
  return calibrate_key_transform(model, pool, k, ids, bos, o.text);
}

std::shared_ptr<const KeyTransform> resolve_key_transform(const KVCalibOptions& o,
                                                          const Model& model, int threads,
                                                          KVDType k) {
  check_kv_calib(o);
  if (!wants_key_transform(o, k)) return nullptr;  // no pool, no tokenizer
  ThreadPool pool(threads);
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  return resolve_key_transform(o, model, tok, pool, k);
}

KVCacheType resolve_kv_type(const KVTypeOptions& o) {
  auto parse = [](const std::string& value, std::string_view flag) {
    auto t = kv_dtype_from_name(value);
    if (!t) fail("{}: unknown KV cache dtype '{}' (expected {})", flag, value, kv_dtype_choices());
    return *t;
  };
  const KVDType both = parse(o.kv, "--kv-dtype");
  KVCacheType t{both, both};
  if (!o.k.empty()) t.k = parse(o.k, "--cache-type-k");
  if (!o.v.empty()) t.v = parse(o.v, "--cache-type-v");
  return t;
}

CLI::Option* add_generation_config_option(CLI::App* cmd, std::string& mode) {
  return cmd
      ->add_option("--generation-config", mode,
                   "auto (default): the model's default sampling (a Hugging Face folder's "
                   "generation_config.json: temperature, top_k, top_p, min_p, "
                   "repetition_penalty, max_new_tokens, do_sample false = greedy; a GGUF's "
                   "general.sampling.* keys) for every parameter not given; none: Kvasir's "
                   "built-in defaults. generation_config.json's eos_token_id list always ends "
                   "generation")
      ->check(CLI::IsMember({"auto", "none"}));
}

SamplingDefaults model_sampling_defaults(const gguf::GGUFFile& file, const std::string& path,
                                         const std::string& mode, std::string* where) {
  SamplingDefaults d;
  if (mode == "none") {
    if (where) *where = "generation defaults: built-in (--generation-config none)";
    return d;
  }
  const std::string hint = "; run with --generation-config none to ignore the model's defaults";
  auto number = [&](const char* key, auto ok, const char* expected) -> std::optional<float> {
    if (!file.has(key)) return std::nullopt;
    const double x = file.get_float(key);
    if (!ok(x)) fail("{}: '{}' = {}: expected a number {}{}", path, key, x, expected, hint);
    return static_cast<float>(x);
  };
  auto integer = [&](const char* key, int64_t lo) -> std::optional<int32_t> {
    if (!file.has(key)) return std::nullopt;
    const int64_t x = file.get_int(key);
    if (x < lo || x > INT32_MAX)
      fail("{}: '{}' = {}: expected an integer in {} .. {}{}", path, key, x, lo, INT32_MAX, hint);
    return static_cast<int32_t>(x);
  };
  // llama.cpp reads a temperature <= 0 as greedy and top_k <= 0 as off.
  if (auto t = number(
          "general.sampling.temp", [](double x) { return std::isfinite(x); }, "(finite)"))
    d.temperature = std::max(*t, 0.0f);
  if (auto k = integer("general.sampling.top_k", INT32_MIN)) d.top_k = std::max(*k, 0);
  d.top_p = number(
      "general.sampling.top_p", [](double x) { return x > 0 && x <= 1; }, "in (0, 1]");
  d.min_p = number(
      "general.sampling.min_p", [](double x) { return x >= 0 && x <= 1; }, "in [0, 1]");
  d.repetition_penalty = number(
      "general.sampling.penalty_repeat",
      [](double x) { return x > 0 && x <= std::numeric_limits<float>::max(); }, "> 0 (1 = off)");
  d.penalty_last_n = integer("general.sampling.penalty_last_n", -1);
  d.max_tokens = integer("general.sampling.kvasir.max_tokens", 1);
  if (where) {
    const std::string source =
        hf::is_hf_folder(path) ? (std::filesystem::path(path) / "generation_config.json").string()
                               : path + " (general.sampling.*)";
    *where = d.empty() ? fmt::format("generation defaults: built-in (none in {})", source)
                       : fmt::format("generation defaults from {}: {}", source, d.describe());
  }
  return d;
}

}  // namespace kvasir::cli
