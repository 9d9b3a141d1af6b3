#!/usr/bin/env node
// llama.cpp tokenizer reference, for tokenizer cross-checks:
//   node tokenize.mjs --model M.gguf --text-file F [--add-special] [--parse-special]
// Prints one JSON array of token ids: llama_tokenize(text, add_special, parse_special) on the
// whole UTF-8 content of F (no trimming). Works with vocab-only GGUF files too.
// add_special is emulated from the vocab flags (see tokenize() in nlc.mjs).
import fs from "node:fs";
import { openModel, parseArgs, tokenize } from "./nlc.mjs";

const args = parseArgs(process.argv.slice(2), ["add-special", "parse-special"]);
if (!args.model || !args["text-file"]) {
  console.error("usage: tokenize.mjs --model M.gguf --text-file F [--add-special] [--parse-special]");
  process.exit(2);
}
const { model } = await openModel(args.model, 1, { vocabOnly: true });
const text = fs.readFileSync(args["text-file"], "utf8");
console.log(JSON.stringify(tokenize(model, text, !!args["add-special"], !!args["parse-special"])));
process.exit(0);
