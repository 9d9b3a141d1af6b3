#include "kvasir/server/chat_prompt.h"

#include "kvasir/chat/error.h"
#include "kvasir/server/api_error.h"

namespace kvasir::server {

ChatPrompter::ChatPrompter(const std::string& source, std::string bos, std::string eos)
    : template_(chat::ChatTemplate::parse(source)), bos_(std::move(bos)), eos_(std::move(eos)) {}

std::string ChatPrompter::render(const ChatRequest& r) const {
  try {
    chat::Json ctx = chat::chat_context(r.messages, r.add_generation_prompt, bos_, eos_, r.tools,
                                        r.template_kwargs);
    return template_.render(ctx);
  } catch (const chat::TemplateError& e) {
    if (e.kind() == chat::ErrorKind::Raised)
      throw ApiError::bad_request(e.message(), "messages", "chat_template_error");
    throw ApiError::bad_request(
        std::string("the chat template failed on these messages: ") + e.what(), "messages",
        "chat_template_error");
  }
}

}  // namespace kvasir::server
