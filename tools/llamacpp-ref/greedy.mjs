#!/usr/bin/env node
// llama.cpp greedy reference: for each prompt, the exact token ids llama.cpp picks by argmax.
//
//   node greedy.mjs --model M.gguf --n 128 --prompts prompts.json [--threads 2]
//                   [--flash-attn auto|on|off]
//
// prompts.json is a JSON array of strings. One JSON line per prompt on stdout:
//   {"prompt", "prompt_tokens", "tokens", "text", "first_eog"}
// - prompt_tokens: llama_tokenize(add_special=true, parse_special=false), i.e. BOS added per
//   the vocab's add_bos flag (EOS only if add_eos), special-token text NOT parsed.
// - tokens: exactly --n generated ids. Sampler chain = greedy only (temperature 0 selects
//   llama_sampler_init_greedy in node-llama-cpp; no repeat/DRY penalty, no top-k/p, no bias).
//   EOG tokens do not stop generation (yieldEogToken); they are fed back like any other token.
//   first_eog: index in `tokens` of the first end-of-generation token, or null.
// - text: detokenization of `tokens` (special tokens not rendered) following the prompt.
// Context: one sequence, n_ctx = max(512, prompt+n rounded up to 256), so no context shift ever
// happens (checked). KV cache K and V types: F16 (llama.cpp default). Flash attention: "auto"
// (llama.cpp default; on CPU this resolves to enabled) unless --flash-attn says otherwise.
// Backend: node-llama-cpp 3.21.1 prebuilt CPU binaries (see scripts/install-llamacpp-ref.sh);
// timings go to stderr.
import fs from "node:fs";
import { openModel, parseArgs, tokenize } from "./nlc.mjs";

const args = parseArgs(process.argv.slice(2));
if (!args.model || !args.n || !args.prompts) {
  console.error("usage: greedy.mjs --model M.gguf --n N --prompts prompts.json [--threads T]" +
                " [--flash-attn auto|on|off]");
  process.exit(2);
}
const n = Number(args.n);
const threads = Number(args.threads ?? 2);
const fa = { auto: "auto", on: true, off: false }[args["flash-attn"] ?? "auto"];
const prompts = JSON.parse(fs.readFileSync(args.prompts, "utf8"));
if (!Array.isArray(prompts) || prompts.some((p) => typeof p !== "string") ||
    !(Number.isInteger(n) && n > 0) || fa === undefined)
  throw new Error("bad arguments: prompts must be a JSON array of strings, n > 0");

const t0 = performance.now();
const { model } = await openModel(args.model, threads);
console.error(`[greedy] model loaded in ${(performance.now() - t0).toFixed(0)} ms`);

for (const prompt of prompts) {
  const promptTokens = tokenize(model, prompt, true, false);
  const need = promptTokens.length + n;
  const contextSize = Math.max(512, Math.ceil(need / 256) * 256);
  const context = await model.createContext({
    contextSize, sequences: 1, threads: { ideal: threads, min: threads },
    flashAttention: fa, failedCreationRemedy: false,
  });
  if (context.contextSize < need) throw new Error(`context ${context.contextSize} < ${need}`);
  const seq = context.getSequence();

  const t1 = performance.now();
  const tokens = [];
  // A prompt must not be empty for evaluate(); llama.cpp would also reject an empty batch.
  if (promptTokens.length === 0) throw new Error(`prompt ${JSON.stringify(prompt)} has no tokens`);
  const gen = seq.evaluate(promptTokens, {
    temperature: 0, topK: 0, topP: 1, minP: 0, yieldEogToken: true,
    repeatPenalty: undefined, dryRepeatPenalty: undefined, tokenBias: undefined, xtc: undefined,
  });
  for await (const token of gen) {
    tokens.push(token);
    if (tokens.length === n) break;          // exactly n tokens; closes the generator
  }
  // No context shift may have erased anything: the sequence holds prompt + n - 1 evaluated ids.
  if (seq.nextTokenIndex !== need - 1)
    throw new Error(`unexpected sequence length ${seq.nextTokenIndex} (want ${need - 1})`);
  const ms = performance.now() - t1;

  const eog = tokens.findIndex((t) => model.isEogToken(t));
  const text = model.detokenize(tokens, false, promptTokens);
  console.log(JSON.stringify({ prompt, prompt_tokens: promptTokens, tokens, text,
                               first_eog: eog < 0 ? null : eog }));
  console.error(`[greedy] ${promptTokens.length}+${n} tokens in ${ms.toFixed(0)} ms ` +
                `(${(n / (ms / 1000)).toFixed(1)} tok/s, n_ctx ${context.contextSize})`);
  await context.dispose();
}
process.exit(0);
