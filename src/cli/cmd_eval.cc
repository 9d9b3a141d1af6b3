// kvasir eval golden -m FILE --set GOLDEN.jsonl [--kv-dtype T] [--json] [--record OUT.jsonl]:
// runs a golden set (eval/golden.h) greedily, case by case, and prints the pass rate and where each
// failing case diverged; exits 1 when a case fails. --record writes the set back with this model's
// outputs as "expected" (how a golden set is made from a reference model).
// kvasir eval report -m REF.gguf [--variants A.gguf,B.gguf] [--kv-dtypes f16,int8,...] -f TEXT
// [--ctx 256] [--set GOLDEN.jsonl] [--tg 128] [--json]: the quality table of
// eval/quality_report.h, in Markdown (or JSON).
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/eval/golden.h"
#include "kvasir/eval/quality_report.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

namespace {

Runner add_eval_golden(CLI::App& eval) {
  auto* cmd = eval.add_subcommand(
      "golden", "Run a golden set: greedy outputs against expected continuations or substrings");
  struct Opts {
    KVTypeOptions kvt;
    std::string model, set, record;
    int threads = 0;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("--set", o->set, "Golden set (JSON Lines: prompt, expected or contains)")
      ->required();
  cmd->add_option("--record", o->record,
                  "Write the set with this model's outputs as \"expected\" to this file");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  add_kv_type_options(cmd, o->kvt);
  cmd->add_flag("--json", o->json, "Print one JSON object");
  return [o]() {
    check_model_path(o->model, "model");
    check_input_file(o->set, "golden set");
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    const auto cases = read_golden_set(o->set, /*need_answer=*/o->record.empty());
    auto model = Model::load(o->model);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    ThreadPool pool(o->threads);
    GoldenOptions go;
    go.kv_type = kvt;
    const auto results = run_golden_set(*model, tok, pool, cases, go);
    if (!o->record.empty()) {
      std::ofstream out(o->record, std::ios::binary);
      out << golden_set_jsonl(cases, results);
      if (!out.flush()) fail("--record {}: cannot write the file", o->record);
      fmt::print(stderr, "recorded {} cases to {}\n", cases.size(), o->record);
      return 0;
    }
    int passed = 0;
    for (const auto& r : results) passed += r.pass ? 1 : 0;
    const double rate = static_cast<double>(passed) / static_cast<double>(results.size());
    if (o->json) {
      nlohmann::json cs = nlohmann::json::array();
      for (const auto& r : results) {
        nlohmann::json c = {{"id", r.id}, {"pass", r.pass}, {"tokens", r.tokens}};
        if (!r.pass) {
          c["output"] = r.output;
          if (r.diverged_char >= 0) {
            c["diverged_char"] = r.diverged_char;
            c["diverged_token"] = r.diverged_token;
          }
        }
        cs.push_back(c);
      }
      nlohmann::json j = {{"model", o->model},     {"set", o->set},
                          {"kv_type", kvt.name()}, {"cases", results.size()},
                          {"passed", passed},      {"pass_rate", rate},
                          {"results", cs}};
      fmt::print("{}\n", j.dump());
    } else {
      for (const auto& r : results) {
        if (r.pass) continue;
        if (r.diverged_char >= 0) {
          fmt::print(
              "FAIL {}: diverged at character {} (generated token {}): expected \"{}\", "
              "got \"{}\"\n",
              r.id, r.diverged_char, r.diverged_token, r.want_at, r.got_at);
        } else {
          fmt::print("FAIL {}: the substring is not in the output \"{}\"\n", r.id, r.output);
        }
      }
      fmt::print("golden set {}: {} of {} cases pass ({:.1f}%), KV {}\n", o->set, passed,
                 results.size(), 100 * rate, kvt.name());
    }
    return passed == static_cast<int>(results.size()) ? 0 : 1;
  };
}

Runner add_eval_report(CLI::App& eval) {
  auto* cmd = eval.add_subcommand(
      "report", "One quality table: model files x KV dtypes (PPL, KLD, top-1, golden, tg)");
  struct Opts {
    ReportOptions r;
    std::string variants, kv_types = "f16";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->r.reference, "Reference GGUF model (compared with f16 KV)")
      ->required();
  cmd->add_option("--variants", o->variants, "Other GGUF files, comma-separated");
  cmd->add_option("--kv-dtypes", o->kv_types,
                  "KV cache dtypes, comma-separated (default f16; names as --kv-dtype)");
  cmd->add_option("-f,--file", o->r.text, "Perplexity text (UTF-8)")->required();
  cmd->add_option("-c,--ctx", o->r.ctx, "Tokens per perplexity chunk (default 256)");
  cmd->add_option("--chunks", o->r.chunks, "Evaluate at most this many chunks");
  cmd->add_option("--set", o->r.golden_set, "Golden set for the pass-rate column");
  cmd->add_option("--tg", o->r.tg, "Also measure tg<N> tok/s (e.g. 128; default 0: no)");
  cmd->add_option("-t,--threads", o->r.threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "Print the rows as one JSON array");
  return [o]() {
    ReportOptions r = o->r;
    check_model_path(r.reference, "model");
    check_text_file(r.text, "text file");
    if (!r.golden_set.empty()) check_input_file(r.golden_set, "golden set");
    auto split = [](const std::string& list) {
      std::vector<std::string> out;
      size_t b = 0;
      while (b <= list.size()) {
        size_t e = list.find(',', b);
        if (e == std::string::npos) e = list.size();
        if (e > b) out.push_back(list.substr(b, e - b));
        b = e + 1;
      }
      return out;
    };
    r.variants = split(o->variants);
    for (const auto& v : r.variants) check_model_path(v, "--variants model");
    r.kv_types.clear();
    for (const auto& name : split(o->kv_types)) {
      const auto t = kv_dtype_from_name(name);
      if (!t)
        fail("--kv-dtypes: unknown KV cache dtype '{}' (expected {})", name, kv_dtype_choices());
      r.kv_types.push_back({*t, *t});
    }
    if (r.kv_types.empty()) fail("--kv-dtypes: no dtype given");
    const auto rows =
        run_quality_report(r, [](const std::string& line) { fmt::print(stderr, "{}\n", line); });
    if (o->json) {
      fmt::print("{}\n", report_json(rows).dump());
    } else {
      fmt::print("{}", report_markdown(rows, r.tg));
    }
    return 0;
  };
}

}  // namespace

Runner add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Quality checks: golden sets, the quality report");
  cmd->require_subcommand(1);
  Runner golden = add_eval_golden(*cmd);
  Runner report = add_eval_report(*cmd);
  auto* golden_cmd = cmd->get_subcommand("golden");
  return [golden, report, golden_cmd]() { return golden_cmd->parsed() ? golden() : report(); };
}

}  // namespace kvasir::cli
