// Shared helpers for the llama.cpp reference harness: loads node-llama-cpp (pinned 3.21.1) from
// the cache folder installed by scripts/install-llamacpp-ref.sh -- never from the repository --
// and parses simple `--key value` / `--flag` command lines.
// The llama.cpp instance is CPU-only and offline: build "never" + skipDownload, so a missing
// prebuilt binary is an error instead of a download or a source build.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

export function nlcDir() {
  const cache = process.env.KVASIR_CACHE || path.join(os.homedir(), ".cache", "kvasir");
  return path.join(cache, "nlc", "node_modules", "node-llama-cpp");
}

export async function loadNlc() {
  const pkg = path.join(nlcDir(), "package.json");
  if (!fs.existsSync(pkg))
    throw new Error(`node-llama-cpp not found at ${nlcDir()}; run scripts/install-llamacpp-ref.sh`);
  const version = JSON.parse(fs.readFileSync(pkg, "utf8")).version;
  if (version !== "3.21.1") throw new Error(`expected node-llama-cpp 3.21.1, found ${version}`);
  return import(pathToFileURL(path.join(nlcDir(), "dist", "index.js")).href);
}

// Returns {nlc, llama, model} for a GGUF file, CPU only, `threads` math threads.
// vocabOnly loads just the tokenizer (works for vocab-only GGUF files).
// llama.cpp log lines (level >= error) are held back and shown only if loading fails: for a
// vocab-only file node-llama-cpp's memory estimator logs a harmless "missing tensor" error.
// After loading, llama.cpp errors go straight to stderr.
export async function openModel(modelPath, threads, { vocabOnly = false } = {}) {
  const nlc = await loadNlc();
  const logs = [];
  let holdLogs = true;
  const llama = await nlc.getLlama({
    gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
    progressLogs: false, maxThreads: threads, logLevel: "error",
    logger: (level, msg) => (holdLogs ? logs.push(`${level}: ${msg}`) : console.error(msg)),
  });
  try {
    const model = await llama.loadModel({ modelPath, gpuLayers: 0, vocabOnly });
    holdLogs = false;
    return { nlc, llama, model };
  } catch (e) {
    console.error(logs.join("\n"));
    throw new Error(`${modelPath}: ${e.message}`);
  }
}

// Tokenizes like llama_tokenize(add_special, parse_special). The addon only exposes
// add_special=false, so BOS/EOS (and WPM's [CLS]/[SEP]) are added here per the vocab flags.
export function tokenize(model, text, addSpecial, parseSpecial) {
  const t = model.tokens;
  const ids = Array.from(model.tokenize(text, parseSpecial));
  if (!addSpecial) return ids;
  const wpm = String(model.vocabularyType) === "wpm";
  if ((wpm || t.shouldPrependBosToken) && t.bos != null) ids.unshift(t.bos);
  if (wpm && t.sep != null) ids.push(t.sep);
  else if (t.shouldAppendEosToken && t.eos != null) ids.push(t.eos);
  return ids;
}

// Minimal argv parser: `--key value` pairs and bare `--flag`s (flags listed in `flags`).
export function parseArgs(argv, flags = []) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error(`unexpected argument: ${a}`);
    const key = a.slice(2);
    if (flags.includes(key)) out[key] = true;
    else if (i + 1 < argv.length) out[key] = argv[++i];
    else throw new Error(`missing value for ${a}`);
  }
  return out;
}
