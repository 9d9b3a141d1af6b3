// kvasir template --chat-template FILE.jinja|NAME --messages MSGS.json: renders a chat template
// (a file, or a built-in such as chatml: chat/builtin_templates.h, BOS written as --bos) the
// way Hugging Face's apply_chat_template(tokenize=False) does and prints the prompt to stdout
// exactly (no newline added). MSGS.json is a JSON array of messages, or an object with
// "messages" (and optionally "tools" and "chat_template_kwargs"), like an OpenAI chat request
// body. --tools and --extra give tools and extra template variables (e.g.
// {"enable_thinking": false}) from JSON files; they take precedence over the request's.
// strftime_now() uses KVASIR_TEMPLATE_NOW (Unix seconds, UTC) when that is set.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.h"
#include "common.h"
#include "kvasir/chat/chat_template.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

chat::Json read_json(const std::string& path, const char* what) {
  try {
    return chat::Json::parse(read_text(path));
  } catch (const chat::Json::exception& e) {
    fail("{}: invalid JSON ({} expected): {}", path, what, e.what());
  }
}

}  // namespace

Runner add_template(CLI::App& app) {
  auto* cmd = app.add_subcommand("template", "Render a chat template for a conversation");
  struct Opts {
    std::string chat_template, messages, tools, extra;
    std::string bos, eos;
    bool no_generation_prompt = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--chat-template", o->chat_template,
                  "Jinja chat template file, or a built-in name (" +
                      chat::builtin_template_names() + "); a file of that name wins")
      ->required();
  cmd->add_option("--messages", o->messages,
                  "JSON file: an array of messages, or an object with \"messages\" (and \"tools\")")
      ->required();
  cmd->add_flag("--no-generation-prompt", o->no_generation_prompt,
                "Render without add_generation_prompt");
  cmd->add_option("--bos", o->bos, "bos_token value (default empty)");
  cmd->add_option("--eos", o->eos, "eos_token value (default empty)");
  cmd->add_option("--tools", o->tools, "JSON file with the tools array");
  cmd->add_option("--extra", o->extra,
                  "JSON file with an object of extra template variables (e.g. enable_thinking)");
  return [o]() {
    const ChatTemplateChoice choice = choose_chat_template(o->chat_template, "--chat-template");
    std::string source = choice.source(/*add_bos=*/true);  // bos_token is --bos (default empty)
    chat::Json doc = read_json(o->messages, "an array of messages or an object with \"messages\"");
    chat::Json messages, tools = nullptr, extra = chat::Json::object();
    if (doc.is_array()) {
      messages = doc;
    } else if (doc.is_object() && doc.contains("messages") && doc["messages"].is_array()) {
      messages = doc["messages"];
      if (doc.contains("tools")) tools = doc["tools"];
      if (doc.contains("chat_template_kwargs")) {
        extra = doc["chat_template_kwargs"];
        if (!extra.is_object())
          fail("{}: \"chat_template_kwargs\" must be a JSON object", o->messages);
      }
    } else {
      fail("{}: expected a JSON array of messages or an object with a \"messages\" array",
           o->messages);
    }
    if (!o->tools.empty()) {
      tools = read_json(o->tools, "an array of tools");
      if (!tools.is_array() && !tools.is_null())
        fail("{}: expected a JSON array of tools", o->tools);
    }
    if (!o->extra.empty()) {
      chat::Json more = read_json(o->extra, "an object");
      if (!more.is_object()) fail("{}: expected a JSON object of template variables", o->extra);
      for (auto it = more.begin(); it != more.end(); ++it) extra[it.key()] = it.value();
    }
    chat::ChatTemplate t = [&] {
      try {
        return chat::ChatTemplate::parse(source);
      } catch (const chat::TemplateError& e) {
        fail("{}: {}", o->chat_template, e.what());
      }
    }();
    std::string prompt = t.render(
        chat::chat_context(messages, !o->no_generation_prompt, o->bos, o->eos, tools, extra));
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
    return 0;
  };
}

}  // namespace kvasir::cli
