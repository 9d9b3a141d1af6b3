#include "kvasir/chat/builtin_templates.h"

#include <array>

namespace kvasir::chat {

namespace {

// Each source is written with whitespace control on every tag ({%- -%}, {{- -}}), so the layout
// below never reaches the output; only the quoted strings do. The llama.cpp code each follows is
// quoted from src/llama-chat.cpp, llm_chat_apply_template (`ss` is the output, `add_ass` is
// add_generation_prompt, trim() strips ASCII white space; Jinja's trim strips Python's, which is
// the same for ASCII text).

// if (tmpl == LLM_CHAT_TEMPLATE_CHATML) {
//     for (auto message : chat) {
//         ss << "<|im_start|>" << message->role << "\n" << message->content << "<|im_end|>\n";
//     }
//     if (add_ass) { ss << "<|im_start|>assistant\n"; }
constexpr std::string_view kChatml = R"J(
{%- for message in messages -%}
  {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)J";

// Qwen2-Instruct's tokenizer_config.json template (llama.cpp detects it as chatml, which drops
// the default system prompt; the model was trained with it):
// {% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{
// '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' +
// message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if
// add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
constexpr std::string_view kQwen = R"J(
{%- for message in messages -%}
  {%- if loop.first and messages[0]['role'] != 'system' -%}
    {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' -}}
  {%- endif -%}
  {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)J";

// LLM_CHAT_TEMPLATE_LLAMA_2 (support_system_message = false, no BOS inside history, no strip):
//     bool is_inside_turn = true; // skip BOS at the beginning
//     ss << "[INST] ";
//     for (auto message : chat) {
//         if (!is_inside_turn) { is_inside_turn = true; ss << "[INST] "; }
//         if (role == "system") { ss << content << "\n"; }   // without <<SYS>>
//         else if (role == "user") { ss << content << " [/INST]"; }
//         else { ss << content << "</s>"; is_inside_turn = false; }
//     }
// (add_ass is not used.) llm_chat_detect_template("mistral") ends here too: the string starts
// with "mistral" and has none of the [SYSTEM_PROMPT] / v1 / v3 markers, so it is this format.
constexpr std::string_view kLlama2 = R"J(
{%- set ns = namespace(inside_turn=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
  {%- if not ns.inside_turn -%}
    {%- set ns.inside_turn = true -%}
    {{- '[INST] ' -}}
  {%- endif -%}
  {%- if message['role'] == 'system' -%}
    {{- message['content'] + '\n' -}}
  {%- elif message['role'] == 'user' -%}
    {{- message['content'] + ' [/INST]' -}}
  {%- else -%}
    {{- message['content'] + '</s>' -}}
    {%- set ns.inside_turn = false -%}
  {%- endif -%}
{%- endfor -%}
)J";

// LLM_CHAT_TEMPLATE_LLAMA_2_SYS: as llama2, but
//         if (role == "system") { ss << "<<SYS>>\n" << content << "\n<</SYS>>\n\n"; }
constexpr std::string_view kLlama2Sys = R"J(
{%- set ns = namespace(inside_turn=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
  {%- if not ns.inside_turn -%}
    {%- set ns.inside_turn = true -%}
    {{- '[INST] ' -}}
  {%- endif -%}
  {%- if message['role'] == 'system' -%}
    {{- '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' -}}
  {%- elif message['role'] == 'user' -%}
    {{- message['content'] + ' [/INST]' -}}
  {%- else -%}
    {{- message['content'] + '</s>' -}}
    {%- set ns.inside_turn = false -%}
  {%- endif -%}
{%- endfor -%}
)J";

// LLM_CHAT_TEMPLATE_MISTRAL_V7 / _V7_TEKKEN:
//     const char * trailing_space = tmpl == LLM_CHAT_TEMPLATE_MISTRAL_V7 ? " " : "";
//     for (auto message : chat) {
//         if (role == "system") { ss << "[SYSTEM_PROMPT]" << trailing_space << content <<
//         "[/SYSTEM_PROMPT]"; } else if (role == "user") { ss << "[INST]" << trailing_space <<
//         content << "[/INST]"; } else { ss << trailing_space << content << "</s>"; }
//     }
// (add_ass is not used.)
constexpr std::string_view kMistralV7 = R"J(
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {{- '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' -}}
  {%- elif message['role'] == 'user' -%}
    {{- '[INST] ' + message['content'] + '[/INST]' -}}
  {%- else -%}
    {{- ' ' + message['content'] + '</s>' -}}
  {%- endif -%}
{%- endfor -%}
)J";

constexpr std::string_view kMistralV7Tekken = R"J(
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' -}}
  {%- elif message['role'] == 'user' -%}
    {{- '[INST]' + message['content'] + '[/INST]' -}}
  {%- else -%}
    {{- message['content'] + '</s>' -}}
  {%- endif -%}
{%- endfor -%}
)J";

// LLM_CHAT_TEMPLATE_LLAMA_3:
//     for (auto message : chat) {
//         ss << "<|start_header_id|>" << role << "<|end_header_id|>\n\n" << trim(message->content)
//         << "<|eot_id|>";
//     }
//     if (add_ass) { ss << "<|start_header_id|>assistant<|end_header_id|>\n\n"; }
constexpr std::string_view kLlama3 = R"J(
{%- for message in messages -%}
  {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim) + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)J";

// LLM_CHAT_TEMPLATE_PHI_3:
//     for (auto message : chat) { ss << "<|" << role << "|>\n" << message->content << "<|end|>\n";
//     } if (add_ass) { ss << "<|assistant|>\n"; }
constexpr std::string_view kPhi3 = R"J(
{%- for message in messages -%}
  {{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|assistant|>\n' -}}
{%- endif -%}
)J";

// LLM_CHAT_TEMPLATE_ZEPHYR:
//     for (auto message : chat) {
//         ss << "<|" << message->role << "|>" << "\n" << message->content << "<|endoftext|>\n";
//     }
//     if (add_ass) { ss << "<|assistant|>\n"; }
constexpr std::string_view kZephyr = R"J(
{%- for message in messages -%}
  {{- '<|' + message['role'] + '|>\n' + message['content'] + '<|endoftext|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|assistant|>\n' -}}
{%- endif -%}
)J";

// LLM_CHAT_TEMPLATE_GEMMA:
//     std::string system_prompt = "";
//     for (auto message : chat) {
//         if (role == "system") { system_prompt += trim(message->content); continue; }
//         role = role == "assistant" ? "model" : message->role;
//         ss << "<start_of_turn>" << role << "\n";
//         if (!system_prompt.empty() && role != "model") { ss << system_prompt << "\n\n";
//         system_prompt = ""; } ss << trim(message->content) << "<end_of_turn>\n";
//     }
//     if (add_ass) { ss << "<start_of_turn>model\n"; }
constexpr std::string_view kGemma = R"J(
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {%- set ns.system = ns.system + (message['content'] | trim) -%}
  {%- else -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{- '<start_of_turn>' + role + '\n' -}}
    {%- if ns.system and role != 'model' -%}
      {{- ns.system + '\n\n' -}}
      {%- set ns.system = '' -%}
    {%- endif -%}
    {{- (message['content'] | trim) + '<end_of_turn>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<start_of_turn>model\n' -}}
{%- endif -%}
)J";

constexpr std::array<BuiltinTemplate, 11> kBuiltins = {{
    {"chatml", kChatml, "<|im_start|>role ... <|im_end|> (llama.cpp chatml)"},
    {"qwen", kQwen, "chatml with Qwen2's default system prompt"},
    {"llama2", kLlama2, "[INST] ... [/INST], system text inlined (llama.cpp llama2)"},
    {"llama2-sys", kLlama2Sys, "[INST] <<SYS>> ... <</SYS>> ... [/INST] (llama.cpp llama2-sys)"},
    {"mistral", kLlama2,
     "the classic [INST] ... [/INST] form: llama.cpp resolves 'mistral' to llama2"},
    {"mistral-v7", kMistralV7, "[SYSTEM_PROMPT] / [INST] ... [/INST] (llama.cpp mistral-v7)"},
    {"mistral-v7-tekken", kMistralV7Tekken,
     "mistral-v7 without the spaces (llama.cpp mistral-v7-tekken)"},
    {"llama3", kLlama3,
     "<|start_header_id|>role<|end_header_id|> ... <|eot_id|> (llama.cpp llama3)"},
    {"phi3", kPhi3, "<|role|> ... <|end|> (llama.cpp phi3)"},
    {"gemma", kGemma, "<start_of_turn>user|model ... <end_of_turn> (llama.cpp gemma)"},
    {"zephyr", kZephyr, "<|role|> ... <|endoftext|> (llama.cpp zephyr)"},
}};

}  // namespace

std::span<const BuiltinTemplate> builtin_templates() {
  return kBuiltins;
}

const BuiltinTemplate* find_builtin_template(std::string_view name) {
  for (const BuiltinTemplate& t : kBuiltins)
    if (t.name == name) return &t;
  return nullptr;
}

std::string builtin_template_names() {
  std::string out;
  for (const BuiltinTemplate& t : kBuiltins) {
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

std::string builtin_template_source(const BuiltinTemplate& t, bool add_bos) {
  std::string s = add_bos ? "{{- bos_token -}}" : "";
  s += t.source;
  return s;
}

}  // namespace kvasir::chat
