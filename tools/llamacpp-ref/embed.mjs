#!/usr/bin/env node
// llama.cpp embedding reference: for each input, the vector llama.cpp's embedding context gives.
//
//   node embed.mjs --model M.gguf --inputs inputs.json [--threads 1] [--kv f16|f32]
//                  [--flash-attn auto|on|off] [--rows]
//
// inputs.json is a JSON array; each entry is a string or an array of token ids. One JSON line per
// input on stdout: {"tokens", "embedding"} and, with --rows, "rows".
// - tokens: what was evaluated. A string is tokenized as llama_tokenize(add_special=true,
//   parse_special=false) (see nlc.mjs); token ids are taken as given. node-llama-cpp's embedding
//   context then prepends BOS / appends EOS where the vocabulary asks for them and the input lacks
//   them (LlamaEmbeddingContext._prepareInput); `tokens` is the list after that.
// - embedding: LlamaEmbeddingContext.getEmbeddingFor(tokens).vector, as llama.cpp computes it.
//   The context is created with embeddings = true and pooling_type UNSPECIFIED, so llama.cpp uses
//   the model's `<arch>.pooling_type`, LLAMA_POOLING_TYPE_NONE when the key is absent (as in
//   every llama-architecture GGUF). With pooling NONE the addon (AddonContext::GetEmbedding)
//   returns llama_get_embeddings_ith(ctx, -1): the last token's row of t_embd, the output of the
//   final RMSNorm ("result_norm"), before the output matrix. Not normalized. I.e. last-token
//   pooling of the final-norm hidden states, without normalization. With a pooling type in the
//   metadata it returns llama_get_embeddings_seq (that pooling, also not normalized).
// - rows (--rows, pooling NONE only): the final-norm row of every token, obtained causally as the
//   embedding of each prefix tokens[0..i] (attention is causal, so token i's row does not depend
//   on later tokens). Mean pooling is the mean of these rows.
// KV cache K and V types: F16 (llama.cpp's default) unless --kv f32. Flash attention: node-llama-
// cpp's default for contexts (off) unless --flash-attn says otherwise. One sequence, n_ctx 512
// (or the next multiple of 256 that holds the longest input). CPU only (nlc.mjs).
import fs from "node:fs";
import { loadNlc, parseArgs, tokenize } from "./nlc.mjs";

const args = parseArgs(process.argv.slice(2), ["rows"]);
if (!args.model || !args.inputs) {
  console.error("usage: embed.mjs --model M.gguf --inputs inputs.json [--threads T] " +
                "[--kv f16|f32] [--flash-attn auto|on|off] [--rows]");
  process.exit(2);
}
const threads = Number(args.threads ?? 1);
const kv = { f16: "F16", f32: "F32" }[args.kv ?? "f16"];
const fa = { auto: "auto", on: true, off: false }[args["flash-attn"] ?? "off"];
const inputs = JSON.parse(fs.readFileSync(args.inputs, "utf8"));
const isTokens = (x) => Array.isArray(x) && x.every((t) => Number.isInteger(t) && t >= 0);
if (!Array.isArray(inputs) || inputs.some((x) => typeof x !== "string" && !isTokens(x)) ||
    kv === undefined || fa === undefined)
  throw new Error("bad arguments: inputs must be a JSON array of strings or token-id arrays");

const nlc = await loadNlc();
const logs = [];
const llama = await nlc.getLlama({
  gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
  progressLogs: false, maxThreads: threads, logLevel: "error",
  logger: (level, msg) => logs.push(`${level}: ${msg}`),
});
let model;
try {
  model = await llama.loadModel({
    modelPath: args.model, gpuLayers: 0, defaultContextFlashAttention: fa,
    experimentalDefaultContextKvCacheKeyType: kv, experimentalDefaultContextKvCacheValueType: kv,
  });
} catch (e) {
  console.error(logs.join("\n"));
  throw new Error(`${args.model}: ${e.message}`);
}
const resolved = inputs.map((x) => (typeof x === "string" ? tokenize(model, x, true, false) : x));
const longest = Math.max(...resolved.map((t) => t.length + 2));
const contextSize = Math.max(512, Math.ceil(longest / 256) * 256);
const ctx = await model.createEmbeddingContext({
  contextSize, batchSize: contextSize, threads: { ideal: threads, min: threads },
});

for (const input of resolved) {
  if (input.length === 0) throw new Error("an input has no tokens");
  const tokens = input.slice();
  ctx._prepareInput(tokens);  // the BOS/EOS that getEmbeddingFor adds (none when present)
  const embedding = Array.from((await ctx.getEmbeddingFor(tokens)).vector);
  const out = { tokens, embedding };
  if (args.rows) {
    out.rows = [];
    for (let i = 1; i <= tokens.length; ++i) {
      // A prefix that ends without the EOS the vocabulary appends would get it added back; this
      // harness is for vocabularies that append none (checked).
      const prefix = tokens.slice(0, i);
      ctx._prepareInput(prefix);
      if (prefix.length !== i) throw new Error("--rows: the vocabulary appends an end token");
      out.rows.push(Array.from((await ctx.getEmbeddingFor(prefix)).vector));
    }
  }
  console.log(JSON.stringify(out));
}
await ctx.dispose();
process.exit(0);
