// The command line before CLI11 (see common.h): command and option checks, llama.cpp / vLLM
// hints, KVASIR_* variables and --config files.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "kvasir/util/edit_distance.h"

namespace kvasir::cli {

namespace {

// llama.cpp (common/arg.cpp) and vLLM flags that Kvasir does not take, with what to do instead.
// `names` lists every spelling; `shown` is how the message names the flag. A flag that is a real
// option of the command being parsed is never looked up here.
struct ForeignFlag {
  std::string_view names, shown, hint;
};

constexpr std::array<ForeignFlag, 34> kForeignFlags = {{
    {"-ngl --gpu-layers --n-gpu-layers -ngld --gpu-layers-draft --n-gpu-layers-draft",
     "-ngl/--n-gpu-layers", "no GPU offload in this build (CPU only); drop the flag"},
    {"-fa --flash-attn", "-fa/--flash-attn", "attention is always flash-style here; drop the flag"},
    {"-hf -hfr --hf-repo -hff --hf-file -hft --hf-token -hfd -hfrd --hf-repo-draft -mu "
     "--model-url",
     "-hf", "downloading from Hugging Face is not supported; pass -m PATH"},
    {"--download-dir --tokenizer --revision --trust-remote-code", "",
     "models are local GGUF files (weights, tokenizer and template in one file); pass -m PATH"},
    {"-np --parallel", "-np/--parallel",
     "kvasir serve batches up to --max-seqs sequences (default 64), each with the whole "
     "context; use --max-seqs N"},
    {"-cb --cont-batching", "-cb/--cont-batching",
     "kvasir serve always batches continuously; drop the flag"},
    {"-nocb --no-cont-batching", "-nocb/--no-cont-batching",
     "kvasir serve --static-batching runs static batching, for comparison"},
    {"-ctkd --cache-type-k-draft -ctvd --cache-type-v-draft", "-ctkd/-ctvd",
     "speculative decoding has no command-line options yet"},
    {"-ub --ubatch-size", "-ub/--ubatch-size",
     "one batch size here: -b/--batch (run, perplexity, imatrix) or --max-batched-tokens (serve)"},
    {"-tb --threads-batch", "-tb/--threads-batch",
     "one thread count for prompt and generation: use -t/--threads"},
    {"-mg --main-gpu -ts --tensor-split -sm --split-mode -dev --device -nkvo --no-kv-offload -kvo "
     "--kv-offload -ot --override-tensor -cmoe --cpu-moe -ncmoe --n-cpu-moe --list-devices "
     "-fit --fit -fitt --fit-target --rpc",
     "", "no GPU offload in this build (CPU only); drop the flag"},
    {"-tp --tensor-parallel-size -pp --pipeline-parallel-size", "",
     "one process, no tensor or pipeline parallelism; drop the flag"},
    {"--gpu-memory-utilization", "",
     "use --memory SIZE, the budget for weights + KV cache (e.g. 8GiB)"},
    {"--mlock --no-mmap --mmap -dio --direct-io -ndio --no-direct-io", "",
     "weights are always memory-mapped read-only; drop the flag"},
    {"-q --quantization --dtype", "",
     "weights run in the GGUF file's own types; convert with kvasir quantize IN OUT --type T"},
    {"--enable-prefix-caching", "",
     "prefix caching is on by default (--no-prefix-caching turns it off); drop the flag"},
    {"-cnv --conversation -i --interactive -if --interactive-first -mli --multiline-input -st "
     "--single-turn",
     "", "no interactive mode: kvasir run generates once; chat through kvasir serve"},
    {"-sys --system-prompt -sysf --system-prompt-file", "",
     "kvasir run takes a raw prompt (-p); system prompts go in kvasir serve's chat messages"},
    {"-r --reverse-prompt", "-r/--reverse-prompt", "use --stop TEXT (repeatable)"},
    {"-e --escape --no-escape", "", "the prompt is used as written (no escape processing)"},
    {"--jinja --no-jinja", "", "chat templates are always Jinja here; drop the flag"},
    {"--chat-template-file", "", "use --chat-template FILE (a file or a built-in name)"},
    {"-md --model-draft --draft --draft-n --draft-max --draft-min --spec-type", "",
     "speculative decoding has no command-line options yet"},
    {"--grammar --grammar-file -j --json-schema -jf --json-schema-file", "",
     "no grammar-constrained sampling yet"},
    {"--mirostat --mirostat-lr --mirostat-ent --typical --typical-p --dynatemp-range "
     "--dynatemp-exp --xtc-probability --xtc-threshold --dry-multiplier --dry-base "
     "--top-nsigma --samplers",
     "",
     "this sampler is not implemented; there are --temp, --top-k, --top-p, --min-p and the "
     "repeat/presence/frequency penalties"},
    {"--rope-freq-base --rope-freq-scale --rope-scale --rope-scaling --yarn-orig-ctx "
     "--yarn-ext-factor --yarn-attn-factor",
     "", "RoPE settings come from the GGUF metadata"},
    {"--embedding --embeddings", "",
     "kvasir serve always serves /v1/embeddings beside the completion routes (choose the pooling "
     "with --pooling mean|cls|last); drop the flag"},
    {"--pooling", "", "only kvasir serve pools embeddings (for its /v1/embeddings)"},
    {"--rerank --reranking", "", "no reranking endpoint; drop the flag"},
    {"--lora --lora-scaled --control-vector -mm --mmproj", "",
     "no LoRA adapters, control vectors or multimodal projectors"},
    {"--numa -C --cpu-mask -Cr --cpu-range --prio --poll", "",
     "no CPU placement options; use -t/--threads N"},
    {"-dt --defrag-thold -kvu --kv-unified -cram --cache-ram --context-shift --swa-full", "",
     "the KV cache is one paged pool with a prefix cache; drop the flag"},
    {"--metrics --slots --props", "", "kvasir serve always exposes /metrics and /health"},
    {"-v --verbose -lv --verbosity --log-verbosity --log-disable --log-file --log-colors", "",
     "no log options here; kvasir serve --log-requests logs each request"},
}};

// llama.cpp's multi-letter single-dash spellings of options Kvasir has, rewritten to the long
// name before parsing (where the command has that option).
constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kSingleDashAliases = {{
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
}};

// KVASIR_* names that already mean something else (tests, scripts); no option takes them.
constexpr std::array<std::string_view, 7> kReservedEnv = {
    "KVASIR_MODELS",       "KVASIR_BIN",           "KVASIR_SOURCE_DIR",   "KVASIR_CACHE",
    "KVASIR_TEMPLATE_NOW", "KVASIR_SANITIZER_RUN", "KVASIR_BENCH_THREADS"};

bool has_word(std::string_view list, std::string_view word) {
  size_t b = 0;
  while (b < list.size()) {
    size_t e = list.find(' ', b);
    if (e == std::string_view::npos) e = list.size();
    if (list.substr(b, e - b) == word) return true;
    b = e + 1;
  }
  return false;
}

// The closest of `names` to `word` when it is close (a typo), else "".
std::string closest(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 4) + 1;
  for (const std::string& n : names) {
    size_t d = edit_distance(word, n);
    if (d < best_d) best = n, best_d = d;
  }
  return best;
}

std::string command_label(const std::vector<std::string>& path) {
  std::string s = "kvasir";
  for (const std::string& p : path) s += " " + p;
  return s;
}

std::string command_list(const CLI::App& app) {
  std::string s;
  for (const CLI::App* sub : app.get_subcommands({}))
    s += fmt::format("  {:<12} {}\n", sub->get_name(), sub->get_description());
  return s;
}

// "256", "-1", "0.5", "1e3": what may follow a one-letter option directly.
bool is_number(std::string_view s) {
  bool digit = false;
  for (char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digit = true;
    } else if (std::string_view(".-+eE").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return digit;
}

// Values the option takes after its name (0: a flag), as CLI11 counts them.
int values_taken(const CLI::Option* op) {
  return std::min(op->get_type_size_min(), op->get_items_expected_min());
}

std::vector<std::string> long_names(const CLI::App& cmd) {
  std::vector<std::string> out;
  for (const CLI::Option* op : cmd.get_options())
    for (const std::string& l : op->get_lnames()) out.push_back("--" + l);
  return out;
}

[[noreturn]] void unknown_option(const CLI::App& app, const CLI::App& cmd,
                                 const std::vector<std::string>& path, const std::string& flag) {
  if (path.empty()) {
    throw UsageError(fmt::format(
        "unknown option '{}': the command comes first (kvasir COMMAND [OPTIONS]); commands:\n{}",
        flag, command_list(app)));
  }
  const std::string who = command_label(path).substr(7);  // "serve", "bench serve"
  if (auto hint = foreign_flag_hint(flag)) throw UsageError(*hint, who);
  const bool is_long = flag.size() > 2 && flag[1] == '-';
  std::string msg = fmt::format("unknown option '{}' for '{}'", flag, command_label(path));
  if (!is_long && flag.size() > 2) {
    msg += "; a single dash takes one letter here (e.g. -n 64, or -n64)";
    if (cmd.get_option_no_throw("-" + flag))
      throw UsageError(msg + ": did you mean -" + flag + "?", who);
  }
  std::string near = closest(flag.substr(0, flag.find('=')), long_names(cmd));
  if (!near.empty()) msg += fmt::format(" (did you mean {}?)", near);
  throw UsageError(msg, who);
}

CLI::App* find_command(CLI::App& cmd, const std::string& word) {
  for (CLI::App* sub : cmd.get_subcommands({}))
    if (!sub->get_name().empty() && sub->check_name(word)) return sub;
  return nullptr;
}

// The option a config-file key names (long name without dashes, '_' for '-' allowed).
CLI::Option* config_option(CLI::App& cmd, const std::string& key) {
  std::string dashed = key;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  for (const std::string& k : {key, dashed}) {
    if (CLI::Option* op = cmd.get_option_no_throw("--" + k)) return op;
    if (k.size() == 1)
      if (CLI::Option* op = cmd.get_option_no_throw("-" + k)) return op;
  }
  return nullptr;
}

std::string env_name_for(const std::vector<std::string>& path, const CLI::Option& op) {
  if (op.get_lnames().empty()) return "";
  std::string name = op.get_lnames().front();
  if (name == "kv-dtype") name = "kv-type";  // serve/plan spell it both ways; one variable
  // `bench serve --model` is the model id a server answers to, as `serve --model-name`.
  if (path == std::vector<std::string>{"bench", "serve"} && name == "model") name = "model-name";
  std::string env = "KVASIR_";
  for (char c : name) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  if (std::find(kReservedEnv.begin(), kReservedEnv.end(), env) != kReservedEnv.end()) return "";
  return env;
}

constexpr const char* kPrecedence =
    "Every option can also be set from the environment, KVASIR_<LONG_NAME> (listed above as "
    "Env:, e.g. KVASIR_PORT), or from a file given with --config FILE (or KVASIR_CONFIG): TOML "
    "or INI lines `name = value`, the name being the long option without its dashes, at the top "
    "of the file or under a [COMMAND] section. Precedence: the command line beats the "
    "environment, which beats the config file, which beats the defaults.";

void setup_command(CLI::App& cmd, std::vector<std::string>& path) {
  if (!cmd.get_config_ptr())
    cmd.set_config("--config", "",
                   "Read options from a TOML or INI file (see below; command line and KVASIR_* "
                   "variables win over it)");
  for (CLI::Option* op : cmd.get_options()) {
    if (op == cmd.get_help_ptr() || op == cmd.get_help_all_ptr()) continue;
    std::string env = env_name_for(path, *op);
    if (!env.empty()) op->envname(env);
  }
  std::string footer = cmd.get_footer();
  if (footer.find("KVASIR_<LONG_NAME>") == std::string::npos)
    cmd.footer(footer.empty() ? kPrecedence : footer + "\n\n" + kPrecedence);
  for (CLI::App* sub : cmd.get_subcommands({})) {
    path.push_back(sub->get_name());
    setup_command(*sub, path);
    path.pop_back();
  }
}

// The config file's values for `cmd`, as --name=value arguments for the options not yet given.
void add_config_values(CLI::App& cmd, const std::vector<std::string>& path, const std::string& file,
                       std::set<const CLI::Option*>& given, std::vector<std::string>& extra) {
  const std::string who = command_label(path).substr(7);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw UsageError(fmt::format("--config {}: no such file", file), who);
  std::vector<CLI::ConfigItem> items;
  try {
    items = cmd.get_config_formatter()->from_file(file);
  } catch (const CLI::Error& e) {
    throw UsageError(fmt::format("--config {}: {}", file, e.what()), who);
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;         // section markers
    if (!item.parents.empty() && item.parents != path) continue;  // another command's section
    CLI::Option* op = config_option(cmd, item.name);
    if (!op || op == cmd.get_config_ptr() || op == cmd.get_help_ptr() || op->get_lnames().empty()) {
      std::string near = closest("--" + item.name, long_names(cmd));
      throw UsageError(fmt::format("--config {}: '{}' is not an option of '{}'{}", file,
                                   item.fullname(), command_label(path),
                                   near.empty() ? "" : " (did you mean " + near.substr(2) + "?)"),
                       who);
    }
    if (given.count(op)) continue;  // the command line or the environment set it
    given.insert(op);
    const std::string name = "--" + op->get_lnames().front();
    if (values_taken(op) == 0) {
      extra.push_back(name + "=" + (item.inputs.empty() ? "true" : item.inputs.front()));
    } else {
      for (const std::string& v : item.inputs) extra.push_back(name + "=" + v);
    }
  }
}

// CLI11 reads an option's envname for every command, chosen or not, and converts what it finds:
// a bad KVASIR_PORT would fail `kvasir run`. prepare_args() has already applied the chosen
// command's variables, so every other command forgets its own.
void forget_env_except(CLI::App& app, const CLI::App* keep) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub != keep)
      for (CLI::Option* op : sub->get_options()) op->envname("");
    forget_env_except(*sub, keep);
  }
}

}  // namespace

std::optional<std::string> foreign_flag_hint(std::string_view flag) {
  const std::string_view name = flag.substr(0, flag.find('='));
  for (const ForeignFlag& f : kForeignFlags)
    if (has_word(f.names, name))
      return fmt::format("{}: {}", f.shown.empty() ? name : f.shown, f.hint);
  return std::nullopt;
}

CLI::Option* add_model_option(CLI::App* cmd, std::string& model, bool positional) {
  return cmd
      ->add_option(positional ? "model,-m,--model" : "-m,--model", model,
                   positional ? "GGUF model (also as the first argument: kvasir " +
                                    cmd->get_name() + " MODEL.gguf)"
                              : std::string("GGUF model"))
      ->required();
}

void add_env_and_config(CLI::App& app) {
  std::vector<std::string> path;
  for (CLI::App* sub : app.get_subcommands({})) {
    path = {sub->get_name()};
    setup_command(*sub, path);
  }
}

PreparedArgs prepare_args(CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> in(argv + 1, argv + argc);
  if (!in.empty() && in.front() == "help") {  // kvasir help [COMMAND...]
    in.erase(in.begin());
    in.push_back("--help");
  }
  if (in.empty())
    throw UsageError(fmt::format("no command given (kvasir COMMAND [OPTIONS]); commands:\n{}",
                                 command_list(app)));

  PreparedArgs out;
  CLI::App* cmd = &app;
  std::vector<std::string> path;
  size_t insert_at = 0;  // environment and file values go right after the command words
  std::set<const CLI::Option*> given;
  std::string config_value;
  bool have_config = false;
  int positionals = 0;
  bool only_positional = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!only_positional) {
      for (const auto& [alias, long_name] : kSingleDashAliases) {
        const std::string_view w = in[i];
        if ((w == alias || (w.size() > alias.size() && w.substr(0, alias.size()) == alias &&
                            w[alias.size()] == '=')) &&
            cmd->get_option_no_throw(std::string(long_name)))
          in[i] = std::string(long_name) + std::string(w.substr(alias.size()));
      }
    }
    const std::string& a = in[i];
    if (only_positional) {
      positionals++;
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    const bool is_long = a.size() > 2 && a[0] == '-' && a[1] == '-';
    const bool is_short =
        a.size() >= 2 && a[0] == '-' && std::isalpha(static_cast<unsigned char>(a[1]));
    if (is_long || is_short) {
      const size_t eq = is_long ? a.find('=') : std::string::npos;
      const std::string name = a.substr(0, eq);
      bool value_attached = eq != std::string::npos;
      CLI::Option* op = cmd->get_option_no_throw(name);
      if (!op && is_short && a.size() > 2) {
        // "-n256": a one-letter option with its number attached; nothing else is grouped.
        CLI::Option* s = cmd->get_option_no_throw(a.substr(0, 2));
        if (s && values_taken(s) > 0 && is_number(std::string_view(a).substr(2))) {
          op = s;
          value_attached = true;
        }
      }
      if (!op) unknown_option(app, *cmd, path, a);
      given.insert(op);
      const int n = value_attached ? 0 : values_taken(op);
      if (op == cmd->get_config_ptr()) {
        have_config = true;
        config_value = value_attached ? (is_long ? a.substr(eq + 1) : a.substr(2))
                                      : (i + 1 < in.size() ? in[i + 1] : "");
      }
      i += static_cast<size_t>(n);  // past its values (CLI11 reports any that are missing)
      continue;
    }
    if (positionals == 0) {
      if (CLI::App* sub = find_command(*cmd, a)) {
        cmd = sub;
        path.push_back(a);
        insert_at = i + 1;
        continue;
      }
      if (path.empty()) {
        std::vector<std::string> names;
        for (const CLI::App* s : app.get_subcommands({})) names.push_back(s->get_name());
        std::string near = closest(a, names);
        throw UsageError(fmt::format("unknown command '{}'{}; commands:\n{}", a,
                                     near.empty() ? "" : " (did you mean '" + near + "'?)",
                                     command_list(app)));
      }
    }
    positionals++;
  }
  for (const std::string& p : path) out.command += (out.command.empty() ? "" : " ") + p;
  forget_env_except(app, path.empty() ? nullptr : cmd);
  if (path.empty()) {
    out.args = std::move(in);
    return out;
  }

  // Positional arguments fill the command's positional options in order.
  for (const CLI::Option* op : cmd->get_options())
    if (op->get_positional() && positionals-- > 0) given.insert(op);

  std::vector<std::string> extra;
  // The environment, for what the command line did not give.
  for (CLI::Option* op : cmd->get_options()) {
    const std::string env = op->get_envname();
    if (env.empty() || given.count(op) || op->get_lnames().empty()) continue;
    const char* v = std::getenv(env.c_str());
    if (!v || !*v) continue;
    given.insert(op);
    out.from_env.push_back(env);
    if (op == cmd->get_config_ptr()) {
      have_config = true;
      config_value = v;
    }
    extra.push_back("--" + op->get_lnames().front() + "=" + v);
  }
  // Then the config file.
  if (have_config && !config_value.empty()) {
    out.config_file = config_value;
    add_config_values(*cmd, path, config_value, given, extra);
  }
  in.insert(in.begin() + static_cast<std::ptrdiff_t>(insert_at), extra.begin(), extra.end());
  out.args = std::move(in);
  return out;
}

}  // namespace kvasir::cli
