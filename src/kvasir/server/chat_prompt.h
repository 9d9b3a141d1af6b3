// ChatPrompter: renders a chat request's messages into the prompt text with the model's chat
// template (the GGUF's tokenizer.chat_template, or a file given to the server).
//
// The template is parsed once at startup (a syntax error is a kvasir::Error then). render()
// passes messages, tools, add_generation_prompt, bos_token / eos_token (the vocabulary's BOS and
// EOS texts) and chat_template_kwargs to the template, as transformers' apply_chat_template does.
// A template that raises (raise_exception, e.g. "roles must alternate") or fails on the input is
// answered as ApiError 400 carrying the template's message.
#pragma once

#include <optional>
#include <string>

#include "kvasir/chat/chat_template.h"
#include "kvasir/server/openai_request.h"

namespace kvasir::server {

class ChatPrompter {
 public:
  ChatPrompter(const std::string& source, std::string bos, std::string eos);
  std::string render(const ChatRequest& request) const;

 private:
  chat::ChatTemplate template_;
  std::string bos_, eos_;
};

}  // namespace kvasir::server
