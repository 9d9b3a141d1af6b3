// kvasir eval golden -m FILE --set GOLDEN.jsonl [--kv-dtype T] [--json] [--record OUT.jsonl]:
// runs a golden set (eval/golden.h) greedily, case by case, and prints the pass rate and where each
// failing case diverged; exits 1 when a case fails. --record writes the set back with this model's
// outputs as "expected" (how a golden set is made from a reference model).
// kvasir eval report -m REF.gguf [--variants A.gguf,B.gguf] [--kv-dtypes f16,int8,...] -f TEXT
// [--ctx 256] [--set GOLDEN.jsonl] [--tg 128] [--json]: the quality table of
// eval/quality_report.h, in Markdown (or JSON).
// kvasir eval gate --baseline gate.json -m MODEL [--no-throughput] [--tol-throughput PCT] [--json]
// [-t N] [--kv-dtype T]: measures MODEL as the baseline says (eval/gate.h) and prints one table
// (metric, baseline, now, tolerance, verdict) and a verdict line. With --update-baseline it
// measures MODEL and writes the baseline instead, from -f TEXT | --kl-base LOGITS, --ctx, --chunks,
// --set GOLDEN, --tg, --pp, --reps and the --tol-* options (an existing baseline's settings are
// kept where no option is given). Exit status, for CI: 0 every check passes (or the baseline was
// written), 1 a metric regressed, 2 anything else (usage, an unreadable or corrupt baseline, a
// missing input, a model that does not load).
#include <fmt/format.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/eval/gate.h"
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
    KVCalibOptions kv_calib;
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
  add_kv_calib_options(cmd, o->kv_calib);
  cmd->add_flag("--json", o->json, "Print one JSON object");
  return [o]() {
    check_model_path(o->model, "model");
    check_input_file(o->set, "golden set");
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    check_kv_calib(o->kv_calib);
    const auto cases = read_golden_set(o->set, /*need_answer=*/o->record.empty());
    auto model = Model::load(o->model);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    ThreadPool pool(o->threads);
    GoldenOptions go;
    go.kv_type = kvt;
    go.key_transform = resolve_key_transform(o->kv_calib, *model, tok, pool, kvt.k);
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
  cmd->add_flag("!--no-kv-calib", o->r.calibrate_keys,
                "Store quantized keys as they are (default: through the key transform calibrated "
                "on the built-in text, as --kv-calib builtin)");
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

Runner add_eval_gate(CLI::App& eval) {
  auto* cmd = eval.add_subcommand(
      "gate",
      "Deployment gate: PPL/KLD, golden set and throughput against a stored baseline "
      "(exit 0 pass, 1 regression, 2 error)");
  struct Opts {
    KVTypeOptions kvt;
    std::string baseline, model, text, kl_base, golden_set;
    int ctx = 0, chunks = -1, tg = 0, pp = 0, reps = 3, threads = 0;
    double tol_ppl = 0, tol_kld = 0, tol_top1 = 0, tol_golden = 0, tol_throughput = 0;
    bool update = false, no_throughput = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--baseline", o->baseline, "Baseline file (JSON, format kvasir-gate/1)")
      ->required();
  cmd->add_option("-m,--model", o->model, "GGUF model to gate (or to record the baseline from)")
      ->required();
  cmd->add_flag("--update-baseline", o->update,
                "Measure the model and write the baseline (keeps an existing baseline's "
                "settings where no option is given)");
  cmd->add_option("-f,--file", o->text, "--update-baseline: perplexity text (UTF-8)");
  cmd->add_option("--kl-base", o->kl_base,
                  "--update-baseline: reference logits (kvasir perplexity --save-logits): PPL, "
                  "mean KLD and top-1 agreement over their text");
  cmd->add_option("-c,--ctx", o->ctx,
                  "--update-baseline: tokens per perplexity chunk (default 512; with --kl-base: "
                  "the file's)");
  cmd->add_option("--chunks", o->chunks, "--update-baseline: at most this many chunks");
  cmd->add_option("--set", o->golden_set, "--update-baseline: golden set (JSON Lines)");
  cmd->add_option("--tg", o->tg, "--update-baseline: measure tg<N> tok/s (0: no)");
  cmd->add_option("--pp", o->pp, "--update-baseline: measure pp<N> tok/s (0: no)");
  cmd->add_option("--reps", o->reps, "--update-baseline: throughput repetitions (default 3)");
  cmd->add_option("--tol-ppl", o->tol_ppl,
                  "--update-baseline: PPL may rise by this many percent (default 1)");
  cmd->add_option("--tol-kld", o->tol_kld,
                  "--update-baseline: mean KLD may rise by this much, absolute (default 0.01)");
  cmd->add_option("--tol-top1", o->tol_top1,
                  "--update-baseline: top-1 agreement may drop by this many points (default 1)");
  cmd->add_option("--tol-golden", o->tol_golden,
                  "--update-baseline: golden pass rate may drop by this many points (default 0)");
  cmd->add_option("--tol-throughput", o->tol_throughput,
                  "Throughput may drop by this many percent (default 10; also when gating, to "
                  "override the baseline's for a noisy machine)");
  cmd->add_flag("--no-throughput", o->no_throughput,
                "Gate: do not measure or check throughput (its rows say skipped)");
  cmd->add_option("-t,--threads", o->threads,
                  "Threads (default: the baseline's, else all cores; changes throughput only)");
  add_kv_type_options(cmd, o->kvt);
  cmd->add_flag("--json", o->json, "Print one JSON object");

  auto given = [cmd](const char* name) { return cmd->get_option(name)->count() > 0; };
  return [o, given]() -> int {
    const char* run_flags[] = {"--file", "--kl-base", "--ctx", "--chunks",
                               "--set",  "--tg",      "--pp",  "--reps"};
    const char* quality_tols[] = {"--tol-ppl", "--tol-kld", "--tol-top1", "--tol-golden"};
    if (!o->update) {
      for (const char* f : run_flags)
        if (given(f))
          throw UsageError(
              fmt::format("{}: the baseline says what to run; {} applies with "
                          "--update-baseline only",
                          f, f));
      for (const char* f : quality_tols)
        if (given(f))
          throw UsageError(
              fmt::format("{}: quality tolerances are part of the baseline; set "
                          "them with --update-baseline (or edit {})",
                          f, o->baseline));
    } else if (o->no_throughput) {
      throw UsageError(
          "--no-throughput: only when gating; to record a baseline without throughput, give "
          "--tg 0 --pp 0");
    }
    const bool kv_given = given("--kv-dtype") || given("--cache-type-k") || given("--cache-type-v");
    auto progress = [o](const std::string& line) {
      if (!o->json) fmt::print(stderr, "{}\n", line);
    };
    // Everything below that is not a regression exits 2: CI tells "worse" from "broken".
    try {
      const KVCacheType kvt = resolve_kv_type(o->kvt);
      check_model_path(o->model, "model");
      namespace gate = kvasir::gate;
      if (o->update) {
        gate::Baseline b;
        std::optional<gate::Baseline> old;
        if (std::filesystem::exists(o->baseline)) {
          try {
            old = gate::read_baseline(o->baseline);
          } catch (const Error& e) {
            fail("{} (remove the file to record a new baseline)", e.what());
          }
          b.run = old->run;
          b.tol = old->tol;
        }
        gate::Run& r = b.run;
        auto path = [&](const std::string& p, const char* what) {
          if (!p.empty()) check_input_file(p, what);
          return gate::path_for_baseline(o->baseline, p);
        };
        if (given("--file")) {
          check_text_file(o->text, "text file");
          r.text = path(o->text, "text file");
          if (!given("--kl-base")) r.kl_base.clear();
        }
        if (given("--kl-base")) {
          r.kl_base = path(o->kl_base, "--kl-base logits file");
          if (!given("--file")) r.text.clear();
          if (!given("--ctx")) r.ctx = 0;
        }
        if (given("--set")) r.golden_set = path(o->golden_set, "golden set");
        if (given("--ctx")) r.ctx = o->ctx;
        if (!r.text.empty() && r.ctx == 0) r.ctx = 512;
        if (given("--chunks")) r.chunks = o->chunks;
        if (given("--tg")) r.tg = o->tg;
        if (given("--pp")) r.pp = o->pp;
        if (given("--reps")) r.reps = o->reps;
        if (given("--threads")) r.threads = o->threads;
        if (kv_given) r.kv = kvt;
        if (given("--tol-ppl")) b.tol.ppl_rise_pct = o->tol_ppl;
        if (given("--tol-kld")) b.tol.kld_rise = o->tol_kld;
        if (given("--tol-top1")) b.tol.top1_drop_points = o->tol_top1;
        if (given("--tol-golden")) b.tol.golden_drop_points = o->tol_golden;
        if (given("--tol-throughput")) b.tol.throughput_drop_pct = o->tol_throughput;
        r.text_sha256 = r.kl_base_sha256 = r.golden_set_sha256 = "";
        gate::validate_run(r, o->baseline);
        gate::MeasureOptions mo;
        mo.verify_inputs = false;
        mo.progress = progress;
        const gate::Measurement m = gate::measure(r, o->baseline, o->model, mo);
        r.text_sha256 = m.text_sha256;
        r.kl_base_sha256 = m.kl_base_sha256;
        r.golden_set_sha256 = m.golden_set_sha256;
        if (r.perplexity()) r.ctx = m.ctx;  // with --kl-base: the file's, stated for the reader
        b.model = m.model;
        b.model.path = gate::path_for_baseline(o->baseline, o->model);
        b.env = m.env;
        b.metrics = m.metrics;
        gate::write_baseline(o->baseline, b);
        // What changed, when the previous baseline measured the same thing the same way.
        std::optional<gate::Report> change;
        if (old && gate::baseline_json(*old).at("run") == gate::baseline_json(b).at("run"))
          change = gate::compare(*old, b.metrics, b.tol);
        if (o->json) {
          nlohmann::ordered_json j = {{"baseline", o->baseline},
                                      {"written", gate::baseline_json(b)}};
          if (change) j["against_previous"] = gate::report_json(*change);
          fmt::print("{}\n", j.dump());
        } else {
          fmt::print("baseline {} written: {} ({}, kvasir {} {}, {})\n\n{}", o->baseline, o->model,
                     b.model.weight_type, b.env.kvasir_version, b.env.kvasir_commit, b.env.backend,
                     gate::values_table(b));
          if (change)
            fmt::print("\nagainst the previous baseline ({}, {}; for information):\n\n{}\n{}\n",
                       old->model.path, old->env.created, gate::report_table(*change),
                       gate::verdict_line(*change));
        }
        return 0;
      }

      if (!std::filesystem::exists(o->baseline))
        fail(
            "{}: no such baseline; record one with kvasir eval gate --baseline {} -m MODEL "
            "--update-baseline and what to run (-f TEXT or --kl-base LOGITS, --set GOLDEN, "
            "--tg N, --pp N)",
            o->baseline, o->baseline);
      const gate::Baseline b = gate::read_baseline(o->baseline);
      gate::Run r = b.run;
      if (given("--threads")) r.threads = o->threads;
      if (kv_given) r.kv = kvt;
      if (o->no_throughput && !r.perplexity() && r.golden_set.empty())
        throw UsageError(fmt::format(
            "--no-throughput: {} checks throughput only; nothing would be checked", o->baseline));
      gate::Tolerances tol = b.tol;
      if (given("--tol-throughput")) {
        if (o->tol_throughput < 0 || o->tol_throughput > 100)
          throw UsageError(
              fmt::format("--tol-throughput: expected 0..100 percent, got {}", o->tol_throughput));
        tol.throughput_drop_pct = o->tol_throughput;
      }
      gate::MeasureOptions mo;
      mo.throughput = !o->no_throughput;
      mo.progress = progress;
      const gate::Measurement m = gate::measure(r, o->baseline, o->model, mo);
      const gate::Report rep = gate::compare(b, m.metrics, tol, !o->no_throughput);

      // Notes a reader needs to trust the comparison.
      std::vector<std::string> notes;
      if (!b.model.sha256.empty() && b.model.sha256 == m.model.sha256)
        notes.push_back("the model is the baseline's file (same sha256)");
      if (!(r.kv == b.run.kv))
        notes.push_back(fmt::format("KV cache {} (the baseline was measured with {})", r.kv.name(),
                                    b.run.kv.name()));
      if (b.run.throughput() && !o->no_throughput &&
          (m.env.backend != b.env.backend || m.env.cpu != b.env.cpu))
        notes.push_back(fmt::format(
            "throughput measured on {}{}; the baseline on {}{}: a different machine or thread "
            "count moves tok/s",
            m.env.backend, m.env.cpu.empty() ? "" : ", " + m.env.cpu, b.env.backend,
            b.env.cpu.empty() ? "" : ", " + b.env.cpu));
      if (!m.metrics.golden_failed.empty())
        notes.push_back(
            fmt::format("golden cases failing now: {} (kvasir eval golden shows "
                        "where they diverge)",
                        fmt::join(m.metrics.golden_failed, ", ")));
      if (o->json) {
        nlohmann::ordered_json j = gate::report_json(rep);
        j["baseline"] = {{"path", o->baseline},
                         {"model", b.model.path},
                         {"weight_type", b.model.weight_type},
                         {"kvasir", b.env.kvasir_version + " " + b.env.kvasir_commit},
                         {"backend", b.env.backend},
                         {"created", b.env.created}};
        j["model"] = {{"path", o->model},
                      {"sha256", m.model.sha256},
                      {"weight_type", m.model.weight_type},
                      {"kvasir", m.env.kvasir_version + " " + m.env.kvasir_commit},
                      {"backend", m.env.backend},
                      {"kv_dtype", r.kv.name()}};
        j["notes"] = notes;
        j["verdict"] = gate::verdict_line(rep);
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("gate {}: {} ({}) against {} ({}, kvasir {} {}, {})\n\n{}", o->baseline,
                   o->model, m.model.weight_type, b.model.path, b.model.weight_type,
                   b.env.kvasir_version, b.env.kvasir_commit, b.env.created,
                   gate::report_table(rep));
        for (const auto& n : notes) fmt::print("note: {}\n", n);
        fmt::print("{}\n", gate::verdict_line(rep));
      }
      return rep.pass() ? 0 : 1;
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      fmt::print(stderr, "kvasir eval gate: error: {}\n", e.what());
      return 2;
    }
  };
}

}  // namespace

Runner add_eval(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("eval", "Quality checks: golden sets, the quality report, the gate");
  cmd->require_subcommand(1);
  Runner golden = add_eval_golden(*cmd);
  Runner report = add_eval_report(*cmd);
  Runner gate = add_eval_gate(*cmd);
  auto* golden_cmd = cmd->get_subcommand("golden");
  auto* gate_cmd = cmd->get_subcommand("gate");
  return [golden, report, gate, golden_cmd, gate_cmd]() {
    if (golden_cmd->parsed()) return golden();
    return gate_cmd->parsed() ? gate() : report();
  };
}

}  // namespace kvasir::cli
