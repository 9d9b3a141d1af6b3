// What the `kvasir` subcommands share: how the command line is read (args.cc) and how inputs are
// checked before any work starts (common.cc).
//
// Command line (args.cc). Before CLI11 parses, prepare_args() walks argv against the command tree
// and refuses, as a UsageError (exit status 2), what CLI11 would misread: an unknown command, an
// unknown option, and above all llama.cpp's multi-letter single-dash flags (-ngl, -fa, -hf, -np,
// -cb, -ctk, ...), which CLI11 would otherwise split into one-letter options (-fa = -f a). A
// single dash takes one letter here, optionally with a number attached (-n256). Flags known from
// llama.cpp or vLLM that have no equivalent get a hint (foreign_flag_hint()).
//
// Every option with a long name can also come from the environment, KVASIR_<LONG_NAME> (upper
// case, '-' -> '_': --api-key-file -> KVASIR_API_KEY_FILE), and from a config file given with
// --config FILE (or KVASIR_CONFIG): TOML or INI lines `name = value`, the name a long option
// without its dashes ('_' may stand for '-'), at the top of the file or under a section named
// after the command ([serve], [bench.serve]); other commands' sections are skipped. Precedence:
// command line, then environment, then config file, then the built-in default. prepare_args()
// implements it by appending the environment's and then the file's values (as --name=value) for
// the options the command line did not give.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvasir/chat/builtin_templates.h"
#include "kvasir/engine.h"
#include "kvasir/kv/key_transform.h"
#include "kvasir/model/model.h"
#include "kvasir/sampling/sampling_params.h"
#include "kvasir/server/api_keys.h"
#include "kvasir/tensor/kv_quant.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::cli {

// A mistake on the command line or in a config file; main prints it, with a pointer to the
// `--help` of `command` ("serve", "bench serve"; "" for kvasir's own), and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what, std::string command = "")
      : std::runtime_error(what), command_(std::move(command)) {}
  const std::string& command() const { return command_; }

 private:
  std::string command_;
};

// ---- command line (args.cc) ----

struct PreparedArgs {
  std::vector<std::string> args;      // for CLI11: argv[1..] plus environment and file values
  std::string command;                // the command path, e.g. "serve", "bench serve"
  std::vector<std::string> from_env;  // the KVASIR_* variables used (names only, never values)
  std::string config_file;            // the config file read ("" when none)
};

// Gives every option of every command its KVASIR_* variable (CLI11 envname, listed in --help),
// adds --config to every command and a footer stating the precedence. Call once, after every
// command was added.
void add_env_and_config(CLI::App& app);

// Throws UsageError (see above); "kvasir help [COMMAND]" becomes "kvasir [COMMAND] --help".
PreparedArgs prepare_args(CLI::App& app, int argc, const char* const* argv);

// The line to print for a llama.cpp / vLLM flag that Kvasir does not take, e.g. for "-ngl":
// "-ngl/--n-gpu-layers: no GPU offload in this build (CPU only); drop the flag"; nullopt for a
// flag the table does not know.
std::optional<std::string> foreign_flag_hint(std::string_view flag);

// The GGUF model option: -m/--model, and also the first positional argument (vLLM's
// `vllm serve MODEL`) when `positional`.
CLI::Option* add_model_option(CLI::App* cmd, std::string& model, bool positional);

// ---- inputs (common.cc) ----

// Throws kvasir::Error "PATH: cannot read the WHAT (REASON)" unless PATH is a readable file.
void check_input_file(const std::string& path, std::string_view what);
// A model path: a Hugging Face folder (a directory with config.json), else as check_input_file.
void check_model_path(const std::string& path, std::string_view what);
std::string read_input_file(const std::string& path, std::string_view what);

// Throws kvasir::Error naming PATH unless its first `limit` bytes are text: no NUL byte and
// valid UTF-8 (a character cut by the limit is fine).
void check_text_file(const std::string& path, std::string_view what,
                     size_t limit = size_t{8} << 20);
// The offset of the first byte that is not UTF-8 text (NUL, or invalid UTF-8), with the reason
// in *why; nullopt when all is text. `prefix`: `bytes` is the start of something longer, so a
// sequence cut at its end is not an error.
std::optional<size_t> find_non_text(std::string_view bytes, bool prefix, std::string* why);

// --chat-template VALUE: a file (when VALUE names one: a path wins over a built-in name) or a
// built-in name (chat/builtin_templates.h). Chosen before the model loads, applied after (a
// built-in's BOS depends on the vocabulary).
struct ChatTemplateChoice {
  const chat::BuiltinTemplate* builtin = nullptr;
  std::string path;  // the file, when not a built-in
  std::string text;  // the file's text
  bool empty() const { return builtin == nullptr && path.empty(); }
  std::string source(bool add_bos) const;
  std::string label() const;  // "chatml (built-in)" or the path
};
// Throws kvasir::Error for a value that is neither a readable file nor a built-in name, listing
// the built-in names.
ChatTemplateChoice choose_chat_template(const std::string& value, std::string_view flag);

// The accepted keys: those of --api-key-file (one a line, '#' comments, the file's keys first,
// so their labels key1.. are the server's) then the --api-key values. Throws kvasir::Error naming
// the file or the flag, never a key.
server::ApiKeys collect_api_keys(const std::vector<std::string>& keys, const std::string& file);

// The KV cache dtype options every command that runs the model takes: --kv-dtype (alias
// --kv-type) for K and V, and llama.cpp's --cache-type-k / --cache-type-v (-ctk / -ctv) for one
// of them. The dtype names are tensor/kv_quant.h's.
struct KVTypeOptions {
  std::string kv = "f16";
  std::string k;  // "" = as --kv-dtype
  std::string v;
};
void add_kv_type_options(CLI::App* cmd, KVTypeOptions& o);
// Throws kvasir::Error naming the flag and the accepted names for an unknown dtype.
KVCacheType resolve_kv_type(const KVTypeOptions& o);

// --kv-calib builtin|none|TEXT, on every command that runs a model with a KV cache: quantized keys
// (int8, fp8, int4 K) are stored through a key transform (kv/key_transform.h) calibrated on the
// built-in text (the default for them), a text file, or none (engine/key_calibration.h).
struct KVCalibOptions {
  std::string text;  // "": builtin for quantized keys, none for f16/f32; "none"; "builtin"; a file
};
void add_kv_calib_options(CLI::App* cmd, KVCalibOptions& o);
// check_kv_calib() refuses a text file that is not readable text; resolve_key_transform() checks
// again, refuses an explicit builtin or text for f16/f32 keys (they take no transform), and
// returns the transform K dtype k uses (null for none), the text tokenized by `tokenizer`.
// Calibrating runs the text through the model once (~1 s for tinyllama-1.1b Q4_0 on 2 cores).
void check_kv_calib(const KVCalibOptions& o);
std::shared_ptr<const KeyTransform> resolve_key_transform(const KVCalibOptions& o,
                                                          const Model& model,
                                                          const Tokenizer& tokenizer,
                                                          ThreadPool& pool, KVDType k);
// The same with a pool of `threads` threads of its own (0: all cores), and the tokenizer of the
// model's file.
std::shared_ptr<const KeyTransform> resolve_key_transform(const KVCalibOptions& o,
                                                          const Model& model, int threads,
                                                          KVDType k);

// Speculative decoding flags (run and serve): --draft FILE (a GGUF file or Hugging Face folder;
// implies --spec draft), --spec none|draft|ngram, --spec-k N|auto, --spec-ngram-min/max N,
// --spec-warn-acceptance R (vLLM's --speculative-config spellings are not taken: they are JSON).
struct SpecOptions {
  std::string draft, method, k = "4";
  int ngram_min = 1, ngram_max = 4;
  double warn_acceptance = 0.6;
};
void add_spec_options(CLI::App* cmd, SpecOptions& o);
// Checks the flags (before anything loads; the draft path's existence too) and returns the
// config without its draft model; a draft is then loaded with load_draft().
SpecConfig resolve_spec(const SpecOptions& o);
// Loads o.draft (when the method is draft) into `holder` and points cfg.draft at it.
void load_draft(const SpecOptions& o, SpecConfig& cfg, std::unique_ptr<Model>& holder);

// --generation-config auto|none (run and serve). auto (the default): the model's own sampling
// defaults replace Kvasir's built-in ones for every parameter the user (run: a flag) or the
// request (serve: a JSON field) leaves unset. They come from a Hugging Face folder's
// generation_config.json (hf/generation_config.h: temperature, top_k, top_p, min_p,
// repetition_penalty, max_new_tokens; do_sample false = greedy) as its GGUF view carries them, or
// from a GGUF file's general.sampling.* keys (llama.cpp's: temp, top_k, top_p, min_p,
// penalty_repeat, penalty_last_n; and Kvasir's general.sampling.kvasir.max_tokens). none:
// Kvasir's built-in defaults. Either way every eos_token_id of generation_config.json ends
// generation: the ids are part of the model (tokenizer.h), as in vLLM.
CLI::Option* add_generation_config_option(CLI::App* cmd, std::string& mode);

// The defaults --generation-config `mode` gives for the model `file` opened from `path`, and in
// *where a line for the startup log saying what was applied and where it came from. Throws
// kvasir::Error naming the file and key for a general.sampling.* key of the wrong type or out of
// range.
SamplingDefaults model_sampling_defaults(const gguf::GGUFFile& file, const std::string& path,
                                         const std::string& mode, std::string* where);

}  // namespace kvasir::cli
