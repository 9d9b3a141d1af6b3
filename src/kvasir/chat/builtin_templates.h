// Built-in chat templates: llama.cpp's named templates (`--chat-template chatml` and friends),
// written as Jinja sources, so a model whose GGUF carries no tokenizer.chat_template can still
// be served with a known format.
//
// Contract: for a conversation whose contents are strings, rendering a built-in's `source` with
// bos_token "" gives byte for byte what llama.cpp's llm_chat_apply_template (src/llama-chat.cpp)
// writes for the template of the same name; each entry's comment in builtin_templates.cc quotes
// the llama.cpp code it follows. Two names are not llama.cpp table entries: "mistral" (llama.cpp
// resolves that string through llm_chat_detect_template to its llama2 format, the classic
// "[INST] ... [/INST]" form without system support, and so does Kvasir) and "qwen" (Qwen2's own
// template: chatml with the default system prompt "You are a helpful assistant.").
//
// BOS: llama.cpp's templates never write BOS; its tokenizer adds it when the vocabulary says so
// (tokenizer.ggml.add_bos_token). Kvasir's server tokenizes a rendered chat prompt without adding
// special tokens (the template writes them, as Hugging Face templates do), so
// builtin_template_source(t, add_bos = the vocabulary's flag) starts with {{ bos_token }} where
// llama.cpp's tokenizer would have added BOS: the prompt tokens are then llama.cpp's.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kvasir::chat {

struct BuiltinTemplate {
  std::string_view name;         // e.g. "chatml"
  std::string_view source;       // Jinja, without BOS
  std::string_view description;  // one line for --help and error messages
};

// Every built-in, in the order of builtin_template_names().
std::span<const BuiltinTemplate> builtin_templates();

// The built-in called `name` (exact, lower case, as llama.cpp's names); nullptr when none is.
const BuiltinTemplate* find_builtin_template(std::string_view name);

// "chatml, llama2, ..." for messages.
std::string builtin_template_names();

// The source to serve: `t.source`, preceded by a BOS token when `add_bos` (see above).
std::string builtin_template_source(const BuiltinTemplate& t, bool add_bos);

}  // namespace kvasir::chat
