// kvasir's mixture rules and quantized bytes against llama-quantize's own, recorded in
// tests/fixtures/quant-mixtures by make.sh there (which runs the two env-gated "tests" at the
// bottom: one writes the fixture models, one turns llama-quantize's logs and outputs into the
// fixture files):
//  - <model>.types: every tensor's type for every column (mixture and options) as
//    `llama-quantize --dry-run` chose it, for synthetic llama/qwen2/MoE/"70B" shapes and
//    stories260K; choose_tensor_types() must give the same for every tensor.
//  - hashes.txt: the FNV-1a of every tensor's bytes in llama-quantize's real output for a small
//    synthetic model (with and without a synthetic imatrix) and for stories260K with the
//    llama-imatrix fixture; quantize_gguf() must write the same bytes (and, without an imatrix,
//    the same whole file). Runs whose quantizer kvasir does not have yet are skipped by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "kvasir/format/gguf.h"
#include "quant_fixtures.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

using namespace quant_fixtures;
namespace fs = std::filesystem;

std::string fixture_dir() {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/quant-mixtures";
}
std::string stories_imatrix() {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/imatrix/stories260K-imatrix.gguf";
}

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream ss(line);
  for (std::string w; ss >> w;) out.push_back(w);
  return out;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  return r;
}

std::vector<int64_t> parse_shape(const std::string& s) {
  std::vector<int64_t> r;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ',');) r.push_back(std::stoll(p));
  return r;
}

std::string hex64(uint64_t h) {
  return fmt::format("{:016x}", h);
}

// ---- the recorded type tables ----

struct TypeTable {
  std::string model;
  MixtureModel hp;
  std::vector<std::string> columns;
  std::vector<MixtureTensor> tensors;
  std::vector<std::vector<std::string>> types;  // [tensor][column]
};

TypeTable read_types(const std::string& path) {
  TypeTable t;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> w = split_ws(line);
    if (w[0] == "model") {
      t.model = w[1];
      for (size_t i = 2; i < w.size(); ++i) {
        const auto eq = w[i].find('=');
        const std::string k = w[i].substr(0, eq), v = w[i].substr(eq + 1);
        if (k == "arch") t.hp.arch = v;
        if (k == "n_layer") t.hp.n_layer = std::stoi(v);
        if (k == "n_head") t.hp.n_head = std::stoi(v);
        if (k == "n_head_kv") t.hp.n_head_kv = std::stoi(v);
        if (k == "n_expert") t.hp.n_expert = std::stoi(v);
      }
    } else if (w[0] == "columns") {
      t.columns.assign(w.begin() + 1, w.end());
    } else {
      EXPECT_EQ(w.size(), t.columns.size() + 3) << path << ": " << line;
      t.tensors.push_back({w[0], *dtype_from_name(w[1]), parse_shape(w[2])});
      t.types.emplace_back(w.begin() + 3, w.end());
    }
  }
  return t;
}

TEST(QuantMixtureFixture, TypesMatchLlamaQuantize) {
  int tables = 0, checked = 0;
  for (const auto& e : fs::directory_iterator(fixture_dir())) {
    if (e.path().extension() != ".types") continue;
    const TypeTable t = read_types(e.path().string());
    ASSERT_FALSE(t.columns.empty()) << e.path();
    ++tables;
    std::vector<std::string> bad;
    for (size_t c = 0; c < t.columns.size(); ++c) {
      const Column col = parse_column(t.columns[c]);
      std::vector<TensorChoice> got = choose_tensor_types(t.hp, t.tensors, mixture_options(col));
      for (size_t i = 0; i < t.tensors.size(); ++i, ++checked) {
        const std::string g(dtype_name(got[i].type));
        if (g != t.types[i][c])
          bad.push_back(fmt::format("{} {} {}: llama-quantize {}, kvasir {} ({})", t.model,
                                    t.columns[c], t.tensors[i].name, t.types[i][c], g,
                                    got[i].reason));
      }
    }
    std::string msg;
    for (size_t i = 0; i < bad.size() && i < 40; ++i) msg += bad[i] + "\n";
    EXPECT_TRUE(bad.empty()) << bad.size() << " differences, the first:\n" << msg;
  }
  EXPECT_GE(tables, 6);
  std::printf("checked %d tensor types in %d tables\n", checked, tables);
}

// The same through the file-level entry point (metadata read from the GGUF, dry run).
TEST(QuantMixtureFixture, Stories260KDryRunMatches) {
  const TypeTable t = read_types(fixture_dir() + "/stories260K.types");
  const Imatrix im = read_imatrix(stories_imatrix());
  for (size_t c = 0; c < t.columns.size(); ++c) {
    const Column col = parse_column(t.columns[c]);
    QuantizeOptions o = quantize_options(col, &im);
    o.dry_run = true;
    // A dry run shows the plan even for mixtures kvasir cannot write (with warnings).
    const QuantizeReport r = quantize_gguf(test_util::stories260k_path(), "", col.ftype, o);
    std::map<std::string, std::string> got;
    for (const TensorReport& tr : r.tensors) got[tr.name] = std::string(dtype_name(tr.to));
    for (size_t i = 0; i < t.tensors.size(); ++i)
      EXPECT_EQ(got[t.tensors[i].name], t.types[i][c]) << t.columns[c] << " " << t.tensors[i].name;
  }
}

// ---- the recorded bytes ----

struct HashRun {
  std::string column;
  std::vector<std::pair<std::string, std::string>> tensors;  // type, hash, in file order
  std::string file_hash;                                     // "" when not recorded
};
struct HashModel {
  std::string model;
  std::vector<std::string> names;
  std::vector<HashRun> runs;
};

std::vector<HashModel> read_hashes() {
  std::vector<HashModel> out;
  std::ifstream in(fixture_dir() + "/hashes.txt");
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> w = split_ws(line);
    if (w[0] == "model") {
      out.push_back({w[1], {}, {}});
    } else if (w[0] == "tensors") {
      out.back().names.assign(w.begin() + 1, w.end());
    } else if (w[0] == "run") {
      HashRun r{w[1], {}, ""};
      for (size_t i = 2; i < w.size(); ++i) {
        const auto colon = w[i].find(':');
        if (w[i].rfind("file:", 0) == 0)
          r.file_hash = w[i].substr(5);
        else
          r.tensors.emplace_back(w[i].substr(0, colon), w[i].substr(colon + 1));
      }
      out.back().runs.push_back(std::move(r));
    }
  }
  return out;
}

TEST(QuantMixtureFixture, BytesMatchLlamaQuantize) {
  const std::vector<HashModel> models = read_hashes();
  ASSERT_GE(models.size(), 2u);
  const std::string dir = test_util::temp_dir("kvasir-quant-hash");
  std::vector<std::string> missing;
  int compared = 0;
  for (const HashModel& hm : models) {
    std::string in;
    Imatrix im;
    if (hm.model == "stories260K") {
      in = test_util::stories260k_path();
      im = read_imatrix(stories_imatrix());
    } else {
      ASSERT_EQ(hm.model, hash_model().name);
      in = dir + "/" + hm.model + ".gguf";
      write_model(hash_model(), in);
      const std::string ip = dir + "/" + hm.model + ".imatrix.gguf";
      write_imatrix_gguf(ip, model_imatrix(hash_model()), {{"synthetic"}, 4, 512});
      im = read_imatrix(ip);
    }
    // The sanitizer run (10x slower) checks every fourth run; the release run all of them.
    const bool sampled = std::getenv("KVASIR_SANITIZER_RUN") != nullptr;
    for (size_t k = 0; k < hm.runs.size(); ++k) {
      const HashRun& run = hm.runs[k];
      if (sampled && k % 4 != 0) continue;
      const Column col = parse_column(run.column);
      const std::string out = dir + "/out.gguf";
      try {
        quantize_gguf(in, out, col.ftype, quantize_options(col, &im));
      } catch (const Error& e) {
        if (std::string(e.what()).find("not implemented") != std::string::npos) {
          missing.push_back(hm.model + " " + run.column);
          continue;
        }
        ADD_FAILURE() << hm.model << " " << run.column << ": " << e.what();
        continue;
      }
      gguf::GGUFFile f(out);
      ASSERT_EQ(f.tensors().size(), hm.names.size()) << run.column;
      for (size_t i = 0; i < hm.names.size(); ++i) {
        const gguf::TensorInfo& t = f.tensors()[i];
        EXPECT_EQ(t.name, hm.names[i]) << run.column << ": tensor order";
        EXPECT_EQ(std::string(dtype_name(t.type)), run.tensors[i].first)
            << hm.model << " " << run.column << " " << t.name;
        EXPECT_EQ(hex64(fnv1a64(t.data, t.nbytes)), run.tensors[i].second)
            << hm.model << " " << run.column << " " << t.name << " (" << dtype_name(t.type) << ")";
      }
      if (!run.file_hash.empty()) {
        const std::string bytes = test_util::read_file(out);
        EXPECT_EQ(hex64(fnv1a64(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())),
                  run.file_hash)
            << hm.model << " " << run.column << ": the whole file (metadata, layout)";
      }
      ++compared;
    }
  }
  std::printf("compared %d runs with llama-quantize's output\n", compared);
  if (!missing.empty()) {
    std::string m;
    for (const std::string& s : missing) m.append(" [").append(s).append("]");
    GTEST_SKIP() << missing.size() << " runs need quantizers not implemented yet:" << m;
  }
}

// ---- fixture generation (make.sh runs these; skipped otherwise) ----

const char* gen_dir() {
  const char* d = std::getenv("KVASIR_MIXTURE_FIXTURE_DIR");
  return d && *d ? d : nullptr;
}

TEST(QuantMixtureFixtureGen, WriteModels) {
  if (!gen_dir()) GTEST_SKIP() << "run by tests/fixtures/quant-mixtures/make.sh";
  const std::string dir = gen_dir();
  fs::create_directories(dir + "/models");
  fs::create_directories(dir + "/logs");
  fs::create_directories(dir + "/out");
  std::ofstream runs(dir + "/runs.txt");
  const std::string any_imatrix = dir + "/models/any.imatrix.gguf";
  write_imatrix_gguf(any_imatrix, model_imatrix(hash_model()), {{"synthetic"}, 4, 512});
  auto type_runs = [&](const std::string& model, const std::string& path,
                       const std::string& imatrix) {
    for (const std::string& c : type_columns(model)) {
      const Column col = parse_column(c);
      std::string safe = c;
      std::replace(safe.begin(), safe.end(), '/', '+');
      runs << dir << "/logs/" << model << "__" << safe << ".log\t--dry-run"
           << llama_args(col, imatrix) << " " << path << " " << mixture_name(col.ftype) << "\n";
    }
  };
  for (const FixtureModel& m : type_models()) {
    const std::string p = dir + "/models/" + m.name + ".gguf";
    write_model(m, p);
    type_runs(m.name, p, any_imatrix);
  }
  type_runs("stories260K", test_util::stories260k_path(), stories_imatrix());

  const FixtureModel hm = hash_model();
  const std::string hp = dir + "/models/" + hm.name + ".gguf";
  write_model(hm, hp);
  const std::string hi = dir + "/models/" + hm.name + ".imatrix.gguf";
  write_imatrix_gguf(hi, model_imatrix(hm), {{"synthetic"}, 4, 512});
  auto hash_runs = [&](const std::string& model, const std::string& path,
                       const std::string& imatrix) {
    for (const std::string& c : hash_columns(model)) {
      const Column col = parse_column(c);
      std::string safe = c;
      std::replace(safe.begin(), safe.end(), '/', '+');
      const std::string base = model + "__" + safe;
      runs << dir << "/logs/hash__" << base << ".log\t" << llama_args(col, imatrix) << " " << path
           << " " << dir << "/out/" << base << ".gguf " << mixture_name(col.ftype) << "\n";
    }
  };
  hash_runs(hm.name, hp, hi);
  hash_runs("stories260K", test_util::stories260k_path(), stories_imatrix());
}

TEST(QuantMixtureFixtureGen, Record) {
  if (!gen_dir() || !std::getenv("KVASIR_MIXTURE_FIXTURE_OUT"))
    GTEST_SKIP() << "run by tests/fixtures/quant-mixtures/make.sh";
  const std::string dir = gen_dir(), out = std::getenv("KVASIR_MIXTURE_FIXTURE_OUT");
  const std::string header =
      "# Recorded from the pinned llama.cpp's llama-quantize by make.sh in this folder; do not "
      "edit.\n";
  // A tensor line of llama-quantize's log: "[  i/  n] NAME - [SHAPE], type = SRC, size = ...",
  // ending in "(TYPE)" when the type chosen differs. Parsed by hand: GCC 12's std::regex trips
  // -Wmaybe-uninitialized under the sanitizers (as in serve_cli_test.cc).
  struct TensorLine {
    std::string name, shape, src, to;  // to: empty when the line names no other type
  };
  auto parse_line = [](const std::string& line) -> std::optional<TensorLine> {
    if (line.empty() || line[0] != '[') return std::nullopt;
    const size_t close = line.find(']');
    const size_t slash = line.find('/');
    if (close == std::string::npos || slash == std::string::npos || slash > close)
      return std::nullopt;
    TensorLine t;
    size_t i = line.find_first_not_of(' ', close + 1);
    if (i == std::string::npos) return std::nullopt;
    const size_t name_end = line.find(' ', i);
    if (name_end == std::string::npos) return std::nullopt;
    t.name = line.substr(i, name_end - i);
    const size_t sh = line.find("- [", name_end);
    const size_t sh_end = sh == std::string::npos ? sh : line.find(']', sh);
    const size_t ty = sh_end == std::string::npos ? sh_end : line.find("type =", sh_end);
    if (ty == std::string::npos || line.find(", size =", ty) == std::string::npos)
      return std::nullopt;
    t.shape = line.substr(sh + 3, sh_end - sh - 3);
    const size_t src = line.find_first_not_of(' ', ty + 6);
    t.src = line.substr(src, line.find(',', src) - src);
    const size_t last = line.find_last_not_of(" \t\r");
    if (last != std::string::npos && line[last] == ')') {
      const size_t open = line.rfind('(', last);
      const std::string inner = line.substr(open + 1, last - open - 1);
      if (!inner.empty() && inner.find(' ') == std::string::npos) t.to = inner;
    }
    return t;
  };

  auto safe = [](std::string c) {
    std::replace(c.begin(), c.end(), '/', '+');
    return c;
  };
  auto lower = [](std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  // ---- types ----
  std::vector<std::pair<std::string, MixtureModel>> models;
  for (const FixtureModel& m : type_models()) models.emplace_back(m.name, mixture_model_of(m));
  models.emplace_back("stories260K", mixture_model(gguf::GGUFFile(test_util::stories260k_path())));
  for (const auto& [model, hp] : models) {
    const std::vector<std::string> cols = type_columns(model);
    std::vector<std::string> names;
    std::map<std::string, std::pair<std::string, std::string>> info;  // src type, shape
    std::map<std::string, std::vector<std::string>> types;
    for (const std::string& c : cols) {
      std::ifstream log(dir + "/logs/" + model + "__" + safe(c) + ".log");
      ASSERT_TRUE(log) << model << " " << c;
      int n = 0;
      for (std::string line; std::getline(log, line);) {
        const std::optional<TensorLine> m = parse_line(line);
        if (!m) continue;
        const std::string name = m->name, src = lower(m->src);
        const std::string to = m->to.empty() ? src : lower(m->to);
        std::vector<int64_t> shape;
        std::stringstream ss(m->shape);
        for (std::string p; std::getline(ss, p, ',');) shape.push_back(std::stoll(p));
        while (shape.size() > 1 && shape.back() == 1) shape.pop_back();
        if (!info.count(name)) {
          names.push_back(name);
          info[name] = {src, shape_text(shape)};
        }
        types[name].push_back(to);
        ++n;
      }
      ASSERT_GT(n, 0) << model << " " << c << ": no tensor lines (did llama-quantize fail?)";
    }
    std::ofstream f(out + "/" + model + ".types");
    f << header
      << "# One row per tensor: name, input type, shape (ne0,ne1,...), then the type "
         "llama-quantize chose for each column.\n";
    f << fmt::format("model {} arch={} n_layer={} n_head={} n_head_kv={} n_expert={}\n", model,
                     hp.arch, hp.n_layer, hp.n_head, hp.n_head_kv, hp.n_expert);
    f << "columns";
    for (const std::string& c : cols) f << " " << c;
    f << "\n";
    for (const std::string& n : names) {
      ASSERT_EQ(types[n].size(), cols.size()) << model << " " << n;
      f << n << " " << info[n].first << " " << info[n].second;
      for (const std::string& t : types[n]) f << " " << t;
      f << "\n";
    }
  }
  // ---- hashes ----
  std::ofstream h(out + "/hashes.txt");
  h << header
    << "# Per model: the tensor names in the order written, then one line per run: each "
       "tensor's type:fnv1a64(bytes), and for runs without an imatrix file:fnv1a64(whole file).\n";
  for (const std::string& model : {hash_model().name, std::string("stories260K")}) {
    h << "model " << model << "\n";
    bool first = true;
    for (const std::string& c : hash_columns(model)) {
      gguf::GGUFFile f(dir + "/out/" + model + "__" + safe(c) + ".gguf");
      if (first) {
        h << "tensors";
        for (const gguf::TensorInfo& t : f.tensors()) h << " " << t.name;
        h << "\n";
        first = false;
      }
      h << "run " << c;
      for (const gguf::TensorInfo& t : f.tensors())
        h << " " << dtype_name(t.type) << ":" << hex64(fnv1a64(t.data, t.nbytes));
      if (!parse_column(c).imatrix) {
        const std::string bytes = test_util::read_file(f.path());
        h << " file:"
          << hex64(fnv1a64(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      }
      h << "\n";
    }
  }
}

}  // namespace
}  // namespace kvasir
