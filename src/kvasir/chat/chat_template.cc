#include "kvasir/chat/chat_template.h"

#include <new>
#include <stdexcept>

#include "kvasir/chat/interpreter.h"
#include "kvasir/chat/json_value.h"
#include "kvasir/chat/parser.h"

namespace kvasir::chat {

struct Template {
  std::string source;
  Body body;
};

namespace {

// The last line of defence of "a hostile template fails with a TemplateError": the limits are
// meant to stop every runaway allocation before it happens, but should one slip through (or a
// library call throw), the caller still gets a TemplateError rather than a foreign exception.
template <class F>
auto guarded(const char* what, F&& f) {
  try {
    return f();
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError(ErrorKind::Limit, std::string(what) + " ran out of memory");
  } catch (const std::exception& e) {
    throw TemplateError(ErrorKind::Runtime, std::string(what) + " failed: " + e.what());
  }
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string source) {
  auto t = std::make_shared<Template>();
  t->body = guarded("parsing the template", [&] { return parse_template(source); });
  t->source = std::move(source);
  return ChatTemplate(std::move(t));
}

const std::string& ChatTemplate::source() const {
  return t_->source;
}

std::string ChatTemplate::render(const Json& context, const RenderOptions& options) const {
  if (!context.is_object())
    throw TemplateError(ErrorKind::Type,
                        std::string("the template context must be a JSON object, got ") +
                            std::string(context.type_name()));
  return guarded("rendering the template", [&] {
    Value ctx = from_json(context);
    Interpreter in(options);
    return in.render(t_->body, ctx);
  });
}

Json chat_context(const Json& messages, bool add_generation_prompt, const std::string& bos,
                  const std::string& eos, const Json& tools, const Json& extra) {
  if (!extra.is_null() && !extra.is_object())
    throw TemplateError(ErrorKind::Type, "extra template variables must be a JSON object");
  Json ctx = Json::object();
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos;
  ctx["eos_token"] = eos;
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  return ctx;
}

std::string apply_chat_template(const std::string& source, const Json& messages,
                                bool add_generation_prompt, const std::string& bos,
                                const std::string& eos, const Json& tools, const Json& extra,
                                const RenderOptions& options) {
  return ChatTemplate::parse(source).render(
      chat_context(messages, add_generation_prompt, bos, eos, tools, extra), options);
}

}  // namespace kvasir::chat
