// The built-in chat templates (chat/builtin_templates.h) render a conversation as llama.cpp's
// llm_chat_apply_template (src/llama-chat.cpp) writes it for the same name, and `--chat-template
// NAME` reaches them from the CLI (a file of that name winning).
//
// The expected strings are llama.cpp's output, written out from the code quoted beside each
// template in builtin_templates.cc, e.g. for chatml
//     ss << "<|im_start|>" << message->role << "\n" << message->content << "<|im_end|>\n";
//     if (add_ass) { ss << "<|im_start|>assistant\n"; }
// for gemma (system merged into the first user turn, contents trimmed, assistant -> model)
//     if (role == "system") { system_prompt += trim(message->content); continue; }
//     ss << "<start_of_turn>" << role << "\n"; ... ss << trim(message->content) <<
//     "<end_of_turn>\n";
// for llama2 (no <<SYS>>: system text then "\n", and add_ass unused)
//     ss << "[INST] "; ... user: content << " [/INST]"; assistant: content << "</s>"
// and for mistral-v7 (trailing_space " "; tekken: "")
//     "[SYSTEM_PROMPT]" << sp << content << "[/SYSTEM_PROMPT]"; "[INST]" << sp << content <<
//     "[/INST]"; sp << content << "</s>"
// They were cross-checked with Python's jinja2 rendering the same sources (trim_blocks,
// lstrip_blocks, as transformers) against a line-by-line Python port of that C++ code.
#include "kvasir/chat/builtin_templates.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "cli_test_util.h"
#include "kvasir/chat/chat_template.h"

namespace kvasir::cli_test {
namespace {

using chat::Json;

// Two turns with a system prompt; the assistant's reply has surrounding spaces (trimmed by
// llama3 and gemma only, as llama.cpp).
Json two_turns_with_system() {
  return Json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": " Hello! "},
    {"role": "user", "content": "How are you?"}])");
}

Json two_turns() {
  return Json::parse(R"([
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"}])");
}

const std::map<std::string, std::string>& expected_with_system() {
  static const std::map<std::string, std::string> m = {
      {"chatml",
       "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi "
       "there<|im_end|>\n<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nHow are "
       "you?<|im_end|>\n<|im_start|>assistant\n"},
      {"qwen",
       "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi "
       "there<|im_end|>\n<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nHow are "
       "you?<|im_end|>\n<|im_start|>assistant\n"},
      {"llama2", "[INST] You are terse.\nHi there [/INST] Hello! </s>[INST] How are you? [/INST]"},
      {"llama2-sys",
       "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello! </s>[INST] How are "
       "you? [/INST]"},
      {"mistral", "[INST] You are terse.\nHi there [/INST] Hello! </s>[INST] How are you? [/INST]"},
      {"mistral-v7",
       "[SYSTEM_PROMPT] You are terse.[/SYSTEM_PROMPT][INST] Hi there[/INST]  Hello! </s>[INST] "
       "How are you?[/INST]"},
      {"mistral-v7-tekken",
       "[SYSTEM_PROMPT]You are terse.[/SYSTEM_PROMPT][INST]Hi there[/INST] Hello! "
       "</s>[INST]How are you?[/INST]"},
      {"llama3",
       "<|start_header_id|>system<|end_header_id|>\n\nYou are "
       "terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi "
       "there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_"
       "header_id|>user<|end_header_id|>\n\nHow are "
       "you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"phi3",
       "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\n Hello! "
       "<|end|>\n<|user|>\nHow are you?<|end|>\n<|assistant|>\n"},
      {"gemma",
       "<start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello!"
       "<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n"},
      {"zephyr",
       "<|system|>\nYou are terse.<|endoftext|>\n<|user|>\nHi there<|endoftext|>\n<|assistant|>\n "
       "Hello! <|endoftext|>\n<|user|>\nHow are you?<|endoftext|>\n<|assistant|>\n"},
  };
  return m;
}

const std::map<std::string, std::string>& expected_without_system() {
  static const std::map<std::string, std::string> m = {
      {"chatml",
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>"
       "user\nBye<|im_end|>\n<|im_start|>assistant\n"},
      // Qwen2's template adds its default system prompt when the conversation has none.
      {"qwen",
       "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|"
       ">\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>"
       "assistant\n"},
      {"llama2", "[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]"},
      {"llama2-sys", "[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]"},
      {"mistral", "[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]"},
      {"mistral-v7", "[INST] Hi[/INST] Hello</s>[INST] Bye[/INST]"},
      {"mistral-v7-tekken", "[INST]Hi[/INST]Hello</s>[INST]Bye[/INST]"},
      {"llama3",
       "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|"
       "end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_"
       "id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"phi3",
       "<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n"},
      {"gemma",
       "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_"
       "turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"},
      {"zephyr",
       "<|user|>\nHi<|endoftext|>\n<|assistant|>\nHello<|endoftext|>\n<|user|>\nBye<|endoftext|>\n<"
       "|assistant|>\n"},
  };
  return m;
}

std::string render(const chat::BuiltinTemplate& t, const Json& messages, bool add_bos,
                   const std::string& bos = "<s>") {
  return chat::apply_chat_template(chat::builtin_template_source(t, add_bos), messages,
                                   /*add_generation_prompt=*/true, bos, "</s>");
}

TEST(BuiltinTemplates, TheRequiredNamesAreThere) {
  for (const char* name :
       {"chatml", "llama2", "llama3", "mistral", "phi3", "gemma", "zephyr", "qwen"}) {
    EXPECT_NE(chat::find_builtin_template(name), nullptr) << name;
    EXPECT_NE(chat::builtin_template_names().find(name), std::string::npos) << name;
  }
  EXPECT_EQ(chat::find_builtin_template("ChatML"), nullptr);  // exact names, as llama.cpp
  EXPECT_EQ(chat::find_builtin_template("nosuch"), nullptr);
  EXPECT_EQ(chat::builtin_templates().size(), expected_with_system().size());
}

TEST(BuiltinTemplates, RenderTwoTurnsAsLlamaCppDoes) {
  for (const chat::BuiltinTemplate& t : chat::builtin_templates()) {
    const std::string name(t.name);
    ASSERT_TRUE(expected_with_system().count(name)) << name;
    // bos_token "<s>" but add_bos false: the template itself never writes BOS, as llama.cpp's.
    EXPECT_EQ(render(t, two_turns_with_system(), false), expected_with_system().at(name)) << name;
    EXPECT_EQ(render(t, two_turns(), false), expected_without_system().at(name)) << name;
  }
}

TEST(BuiltinTemplates, BosComesFirstWhenTheVocabularyAddsIt) {
  // llama.cpp's tokenizer adds BOS to the rendered text when tokenizer.ggml.add_bos_token says
  // so; Kvasir's server adds no special tokens to a chat prompt, so the template writes it.
  for (const chat::BuiltinTemplate& t : chat::builtin_templates()) {
    const std::string name(t.name);
    EXPECT_EQ(render(t, two_turns(), true, "<|begin_of_text|>"),
              "<|begin_of_text|>" + expected_without_system().at(name))
        << name;
  }
}

std::string write_messages() {
  std::string path = tmp("builtin-msgs.json");
  std::ofstream(path) << two_turns().dump();
  return path;
}

TEST(CliTemplate, RendersABuiltInByName) {
  Result r = kvasir("template --chat-template chatml --messages " + write_messages());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, expected_without_system().at("chatml"));
  r = kvasir("template --chat-template llama3 --bos '<|begin_of_text|>' --messages " +
             write_messages());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "<|begin_of_text|>" + expected_without_system().at("llama3"));
}

TEST(CliTemplate, AFileWinsOverABuiltInNameAndAnUnknownNameListsTheBuiltIns) {
  const std::string dir = tmp("template-cwd");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/chatml") << "FROM THE FILE";
  Result r = kvasir_in(dir, "", "template --chat-template chatml --messages " + write_messages());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "FROM THE FILE");

  r = kvasir("template --chat-template no-such-template --messages " + write_messages());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no-such-template"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chatml, qwen, llama2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
