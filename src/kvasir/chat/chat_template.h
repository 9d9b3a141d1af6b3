// Chat templates: Kvasir's own interpreter for the Jinja2 subset that model chat templates use.
//
// Contract: for the templates models ship (tokenizer_config.json / GGUF
// tokenizer.chat_template), render() produces byte-for-byte what Hugging Face transformers
// produces, i.e. Python's Jinja2 configured as
// `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with the loopcontrols
// extension, the `{% generation %}` tag, globals raise_exception(msg) and strftime_now(fmt), and
// `tojson` = json.dumps(ensure_ascii=False, ...). Values follow Python semantics (truthiness,
// str()/repr() formatting, int vs float, Undefined). A template that calls raise_exception(msg)
// fails with a TemplateError of kind Raised whose message() is msg; syntax errors carry line and
// column. Rendering is bounded (output size, work, recursion depth — see RenderOptions) so a
// hostile template cannot hang or crash the server.
//
// Why hand-written: no C++ Jinja implementation packaged in Debian renders Hugging Face chat
// templates exactly (Python semantics for values, whitespace control, sandbox rules, tojson),
// and being off by one space or newline changes the prompt's tokens.
//
// A ChatTemplate is parsed once and is immutable; render() may be called concurrently from
// several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kvasir/chat/error.h"
#include "kvasir/chat/limits.h"

namespace kvasir::chat {

// Template variables are JSON objects whose key order is kept: Python dicts are ordered and
// `tojson` / iteration reveal that order, so callers must build them as ordered_json (a
// nlohmann::json converts implicitly, but its keys are already sorted).
using Json = nlohmann::ordered_json;

struct RenderOptions {
  // Time strftime_now() formats, as Unix seconds rendered in UTC. When unset: the environment
  // variable KVASIR_TEMPLATE_NOW (Unix seconds, UTC) if set, else the current local time.
  std::optional<int64_t> now;
  // The prompt, and any string built on the way; also the largest format width or precision,
  // padding width or repetition a template may ask for (see limits.h).
  size_t max_output_bytes = kDefaultMaxOutputBytes;
  // Evaluation steps (+ bytes built / 16, + bytes scanned / 64, + items visited); ~1 s of CPU.
  // Also the most items one list may be built with.
  size_t max_steps = kDefaultMaxSteps;
  int max_depth = kDefaultMaxDepth;  // nested evaluation frames (macro recursion etc.)
};

struct Template;

class ChatTemplate {
 public:
  // Throws TemplateError(Syntax) with line and column.
  static ChatTemplate parse(std::string source);

  // `context` is a JSON object of template variables (messages, add_generation_prompt, ...).
  std::string render(const Json& context, const RenderOptions& options = {}) const;

  const std::string& source() const;

 private:
  explicit ChatTemplate(std::shared_ptr<const Template> t) : t_(std::move(t)) {}
  std::shared_ptr<const Template> t_;
};

// Renders like transformers' apply_chat_template(tokenize=False): variables messages, tools
// (null when absent, as transformers passes it), documents (null unless given in `extra`),
// add_generation_prompt, bos_token, eos_token, plus every key of `extra` (e.g. enable_thinking).
Json chat_context(const Json& messages, bool add_generation_prompt, const std::string& bos,
                  const std::string& eos, const Json& tools = nullptr,
                  const Json& extra = Json::object());

std::string apply_chat_template(const std::string& source, const Json& messages,
                                bool add_generation_prompt, const std::string& bos,
                                const std::string& eos, const Json& tools = nullptr,
                                const Json& extra = Json::object(),
                                const RenderOptions& options = {});

}  // namespace kvasir::chat
