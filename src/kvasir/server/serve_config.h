// kvasir.toml: the server's configuration file (`kvasir serve --config kvasir.toml`), parsed into
// plain structs. This file only reads and checks the file; `kvasir serve` merges it with its
// flags (the command line beats the environment, which beats the file), plans memory and loads
// the models.
//
// The format (TOML 1.0; every table and key is optional unless marked required):
//
//   port = 8080                   # top-level keys (and a [serve] table): kvasir serve's options,
//                                 #   read by the --config mechanism every command has
//   [server]                      # the same meanings as kvasir serve's flags
//   host = "127.0.0.1"            # --host
//   port = 8080                   # --port, 0..65535 (0: any free port)
//   memory = "8GiB"               # --memory: ONE budget for all models (weights + KV), planned
//                                 #   together; a size string (engine/memory_plan.h's parse_size)
//                                 #   or an integer number of bytes
//   api_key_file = "keys.txt"     # --api-key-file
//   max_queue = 256               # --max-queue, >= 0 (0: no limit)
//   threads = 2                   # --threads, >= 0 (0: all cores)
//
//   [require]
//   engine = ">=0.1, <0.2"        # refuse to start on an engine version outside this range
//                                 #   (util/version_range.h's grammar; server/version_pin.h)
//
//   [[model]]                     # one table per served model, in serving order
//   name = "small"                # required: the model id clients send; unique, not a route's
//                                 #   name, no spaces or control characters
//   path = "a.gguf"               # required: a GGUF file or a Hugging Face folder
//   max_seqs = 32                 # --max-seqs, >= 1
//   max_batched_tokens = 512      # --max-batched-tokens, >= 1
//   ctx = 4096                    # --ctx, >= 0 (0: the model's trained context)
//   kv_dtype = "int8"             # --kv-dtype (tensor/kv_quant.h's names)
//   chat_template = "chatml"      # --chat-template: a file or a built-in name
//   tool_call_parser = "hermes"   # --tool-call-parser (server/tool_calls.h's names)
//   pooling = "mean"              # --pooling: mean, cls, last or none
//   draft = "draft.gguf"          # --draft: a draft model for speculative decoding
//   spec_k = 4                    # --spec-k: 1..32 or "auto"
//   price_input = 0.10            # USD per 1M prompt tokens, >= 0
//   price_output = 0.40           # USD per 1M generated tokens, >= 0
//   price_cached = 0.05           # USD per 1M prompt tokens from the prefix cache, >= 0
//   sha256 = "9f86d0...0f00a08"   # pin: 64 hex digits, util/sha256.h's sha256_model_path digest;
//                                 #   kvasir serve refuses to start when the model's differs
//   quantization = "q4_k"         # pin: the dtype most matrix weights are in (a mixture's main
//                                 #   type: q4_k for Q4_K_M; Model::predominant_weight_type)
//                                 #   (tensor/dtype.h's dtype_name)
//   memory_share = 0.5            # fraction of the KV budget for this model, in (0, 1]; the
//                                 #   shares given sum to at most 1 (default: by need)
//
//   [[route]]                     # a route: a model id that picks between two served models
//   name = "auto"                 # default "auto"; unique, not a model's name
//   small = "small"               # required: a [[model]] name
//   large = "large"               # required: another [[model]] name
//   max_small_prompt_tokens = 512 # >= 0 (server/route_policy.h has the meanings)
//   max_small_difficulty = 2.5    # nats, >= 0
//   fallover_waiting = 1          # >= 0
//   [route.keys]                  # API key label -> "small" | "large" | "auto"
//   key1 = "large"
//
// Contract:
//  - Unknown tables and keys, wrong types, out-of-range values and broken cross-references
//    (a route naming a model that is not in the file, two models or routes of one name, a model
//    named like a route, a bad key policy, memory shares over 1) throw kvasir::Error naming the
//    file, the line and column where toml++ knows them, the table and the key, e.g.
//      kvasir.toml:14:1: [[model]] #2 (name 'small'): unknown key 'prce_input' (did you mean
//      'price_input'?)
//    A TOML syntax error is reported as toml++ words it, with the file, line and column.
//  - Relative paths (path, draft, api_key_file) are resolved against the config file's folder
//    (`base_dir`); chat_template too when base_dir/<value> is an existing file (otherwise it is
//    kept as written: a built-in name, or a path kvasir serve checks). Nothing else touches the
//    file system: model files are not opened or hashed here.
//  - Names and values are checked for shape only (a kv_dtype name exists, a sha256 is 64 hex
//    digits, stored lower-case; a quantization name is a known dtype, stored as dtype_name
//    prints it); whether the model matches its pins is server/version_pin.h's question.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvasir/server/route_policy.h"
#include "kvasir/util/version_range.h"

namespace kvasir::server {

// [server]: each field set only when the file sets it.
struct ServerSection {
  std::optional<std::string> host;
  std::optional<int> port;
  std::optional<int64_t> memory_bytes;  // from `memory` (a size string or bytes)
  std::optional<std::string> memory;    // `memory` as written ("8GiB"; bytes as a number string)
  std::optional<std::string> api_key_file;  // resolved against the config's folder
  std::optional<int> max_queue;
  std::optional<int> threads;
};

// One [[model]] table. Optional fields unset mean "kvasir serve's flag or default".
struct ModelEntry {
  std::string name;
  std::string path;  // resolved against the config's folder
  std::optional<int> max_seqs, max_batched_tokens, ctx;
  std::optional<std::string> kv_dtype, chat_template, tool_call_parser, pooling;
  std::optional<std::string> draft;   // resolved against the config's folder
  std::optional<std::string> spec_k;  // "auto" or a number in 1..32, as a string (like --spec-k)
  std::optional<double> price_input, price_output, price_cached;
  std::optional<std::string> sha256;        // 64 lower-case hex digits
  std::optional<std::string> quantization;  // as dtype_name prints it, e.g. "q8_0"
  std::optional<double> memory_share;       // (0, 1]
  // Where the table is, for messages: "kvasir.toml:12:1: [[model]] #2 (name 'small')".
  std::string where;
};

struct ServeConfigFile {
  std::string source;  // the file name messages use
  ServerSection server;
  std::optional<VersionRange> require_engine;
  std::vector<ModelEntry> models;
  std::vector<RoutePolicy> routes;
};

// Reads and parses `path`; relative paths in it resolve against the file's folder. Throws
// kvasir::Error naming the file when it cannot be read, and as parse_serve_config otherwise.
ServeConfigFile load_serve_config(const std::string& path,
                                  const std::vector<std::string>& other_sections = {});

// Parses `text` (the contents of `source_name`, used in messages only); relative paths resolve
// against `base_dir` (an empty base_dir leaves them as written).
// Top-level keys that are not tables, and tables named in `other_sections` (kvasir's commands:
// `[serve]`, `[run]`, ...), are left alone: they are command-line options, which the --config
// mechanism of every command reads and checks (src/cli/args.cc).
ServeConfigFile parse_serve_config(std::string_view text, const std::string& source_name,
                                   const std::filesystem::path& base_dir,
                                   const std::vector<std::string>& other_sections = {});

}  // namespace kvasir::server
