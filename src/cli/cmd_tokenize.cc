// kvasir tokenize -m FILE "text": the token ids as a JSON array (no BOS/EOS unless --add-special;
// special-token text recognised only with --parse-special). --detok reverses: the argument is a
// JSON array of ids and the text is printed. Works on vocabulary-only GGUF files.
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.h"
#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

Runner add_tokenize(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("tokenize", "Tokenize text (or detokenize ids) with a model's vocabulary");
  struct Opts {
    std::string model, text, file;
    bool add_special = false, parse_special = false, detok = false, pieces = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF file (a vocabulary-only file is enough)")
      ->required();
  cmd->add_option("text", o->text, "Text to tokenize (or a JSON array of ids with --detok)");
  cmd->add_option("-f,--file", o->file, "Read the text from a file instead");
  cmd->add_flag("--add-special", o->add_special, "Add BOS/EOS as the vocabulary says");
  cmd->add_flag("--parse-special", o->parse_special, "Recognise special-token text such as <s>");
  cmd->add_flag("--detok", o->detok, "Detokenize a JSON array of ids");
  cmd->add_flag("--pieces", o->pieces, "Print [id, piece] pairs instead of ids");
  return [o]() {
    std::string input = o->text;
    if (!o->file.empty()) {
      std::ifstream in(o->file, std::ios::binary);
      if (!in) fail("{}: cannot read", o->file);
      std::stringstream ss;
      ss << in.rdbuf();
      input = ss.str();
    }
    Tokenizer tok = Tokenizer::from_gguf(*hf::open_model_file(o->model));
    if (o->detok) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(input);
      } catch (const nlohmann::json::exception& e) {
        fail("--detok expects a JSON array of token ids: {}", e.what());
      }
      if (!j.is_array()) fail("--detok expects a JSON array of token ids");
      std::vector<TokenId> ids;
      for (const auto& x : j) {
        if (!x.is_number_integer()) fail("--detok: {} is not a token id", x.dump());
        TokenId id = x.get<TokenId>();
        if (!tok.is_valid(id)) fail("--detok: token id {} is outside [0, {})", id, tok.n_vocab());
        ids.push_back(id);
      }
      fmt::print("{}", tok.decode(ids, false, o->parse_special));
      return 0;
    }
    auto ids = tok.encode(input, o->add_special, o->parse_special);
    if (o->pieces) {
      nlohmann::json out = nlohmann::json::array();
      for (TokenId id : ids) out.push_back({id, tok.token_to_piece(id, true)});
      fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("{}\n", nlohmann::json(ids).dump());
    }
    return 0;
  };
}

}  // namespace kvasir::cli
