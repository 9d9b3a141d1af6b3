#include "kvasir/server/serve_config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "kvasir/engine/memory_plan.h"
#include "kvasir/engine/pooling.h"
#include "kvasir/server/tool_calls.h"
#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/kv_quant.h"
#include "kvasir/util/edit_distance.h"
#include "kvasir/util/error.h"
#include "kvasir/util/sha256.h"

namespace kvasir::server {

namespace {

namespace fs = std::filesystem;

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return n.is_array_of_tables() ? "an array of tables" : "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

// The reader of one file: every message starts "FILE:LINE:COL: TABLE: ".
class Reader {
 public:
  Reader(std::string source, fs::path base_dir)
      : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  const std::string& source() const { return source_; }

  std::string at(const toml::source_region& r) const {
    if (r.begin.line == 0) return source_;
    return fmt::format("{}:{}:{}", source_, r.begin.line, r.begin.column);
  }

  template <class... Args>
  [[noreturn]] void bad(const toml::source_region& r, std::string_view table,
                        fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {}: {}", at(r), table, fmt::format(f, std::forward<Args>(args)...));
  }

  // Refuses any key of `t` not in `known`, suggesting the nearest known one.
  void only_keys(const toml::table& t, std::string_view table,
                 std::initializer_list<std::string_view> known) const {
    for (auto&& [k, v] : t) {
      const std::string_view key = k.str();
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string_view best;
      size_t best_d = 3;  // suggest only close spellings
      for (std::string_view c : known)
        if (size_t d = edit_distance(key, c); d < best_d) best_d = d, best = c;
      std::string known_list;
      for (std::string_view c : known)
        known_list += (known_list.empty() ? "" : ", ") + std::string(c);
      if (!best.empty()) bad(k.source(), table, "unknown key '{}' (did you mean '{}'?)", key, best);
      bad(k.source(), table, "unknown key '{}' (expected one of: {})", key, known_list);
    }
  }

  std::optional<std::string> str(const toml::table& t, std::string_view table,
                                 std::string_view key) const {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_string())
      bad(n->source(), table, "'{}' must be a string, got {}", key, type_name(*n));
    return n->as_string()->get();
  }

  std::optional<int> integer(const toml::table& t, std::string_view table, std::string_view key,
                             int64_t lo, int64_t hi) const {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_integer())
      bad(n->source(), table, "'{}' must be an integer, got {}", key, type_name(*n));
    const int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) {
      if (hi == std::numeric_limits<int>::max())
        bad(n->source(), table, "'{}' must be at least {}, got {}", key, lo, v);
      bad(n->source(), table, "'{}' must be in {}..{}, got {}", key, lo, hi, v);
    }
    return static_cast<int>(v);
  }

  // An integer or a float; finite and at least `lo` (and at most `hi` when given).
  std::optional<double> number(const toml::table& t, std::string_view table, std::string_view key,
                               double lo, std::optional<double> hi = std::nullopt,
                               bool lo_exclusive = false) const {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    double v;
    if (n->is_integer())
      v = static_cast<double>(n->as_integer()->get());
    else if (n->is_floating_point())
      v = n->as_floating_point()->get();
    else
      bad(n->source(), table, "'{}' must be a number, got {}", key, type_name(*n));
    const bool low = lo_exclusive ? !(v > lo) : !(v >= lo);
    if (!std::isfinite(v) || low || (hi && v > *hi)) {
      if (hi)
        bad(n->source(), table, "'{}' must be in {}{}, {}], got {}", key, lo_exclusive ? "(" : "[",
            lo, *hi, v);
      bad(n->source(), table, "'{}' must be a number >= {}, got {}", key, lo, v);
    }
    return v;
  }

  const toml::table* table_at(const toml::table& t, std::string_view key) const {
    const toml::node* n = t.get(key);
    if (!n) return nullptr;
    if (!n->is_table())
      bad(n->source(), "top level", "'{}' must be a table ([{}]), got {}", key, key, type_name(*n));
    return n->as_table();
  }

  // A path relative to the config's folder.
  std::string resolve(const std::string& p) const {
    if (p.empty() || base_dir_.empty() || fs::path(p).is_absolute()) return p;
    return (base_dir_ / p).lexically_normal().string();
  }

  // chat_template: a file next to the config wins over a built-in name, as on the command line.
  std::string resolve_if_file(const std::string& p) const {
    if (p.empty() || base_dir_.empty() || fs::path(p).is_absolute()) return p;
    std::error_code ec;
    const fs::path there = base_dir_ / p;
    return fs::is_regular_file(there, ec) ? there.lexically_normal().string() : p;
  }

 private:
  std::string source_;
  fs::path base_dir_;
};

void read_server(const Reader& r, const toml::table& t, ServerSection& s) {
  const std::string_view T = "[server]";
  r.only_keys(t, T, {"host", "port", "memory", "api_key_file", "max_queue", "threads"});
  s.host = r.str(t, T, "host");
  if (s.host && s.host->empty()) r.bad(t.get("host")->source(), T, "'host' is empty");
  s.port = r.integer(t, T, "port", 0, 65535);
  if (const toml::node* n = t.get("memory")) {
    if (n->is_integer()) {
      const int64_t v = n->as_integer()->get();
      if (v < 1) r.bad(n->source(), T, "'memory' must be a positive number of bytes, got {}", v);
      s.memory_bytes = v;
      s.memory = std::to_string(v);
    } else if (n->is_string()) {
      s.memory = n->as_string()->get();
      s.memory_bytes = parse_size(*s.memory, fmt::format("{}: {}: 'memory'", r.at(n->source()), T));
      if (*s.memory_bytes < 1)
        r.bad(n->source(), T, "'memory' must be a positive size, got '{}'", *s.memory);
    } else {
      r.bad(n->source(), T, "'memory' must be a size string (e.g. \"8GiB\") or bytes, got {}",
            type_name(*n));
    }
  }
  if (auto f = r.str(t, T, "api_key_file")) {
    if (f->empty()) r.bad(t.get("api_key_file")->source(), T, "'api_key_file' is empty");
    s.api_key_file = r.resolve(*f);
  }
  s.max_queue = r.integer(t, T, "max_queue", 0, std::numeric_limits<int>::max());
  s.threads = r.integer(t, T, "threads", 0, std::numeric_limits<int>::max());
}

bool bad_name(const std::string& s) {
  return s.empty() || std::any_of(s.begin(), s.end(), [](char c) {
           const auto u = static_cast<unsigned char>(c);
           return u <= ' ' || u == 0x7f;
         });
}

ModelEntry read_model(const Reader& r, const toml::table& t, size_t index) {
  ModelEntry m;
  std::string T = fmt::format("[[model]] #{}", index + 1);
  // The name first, so that every later message names the model.
  const auto name = r.str(t, T, "name");
  if (name) {
    T += fmt::format(" (name '{}')", *name);
    if (bad_name(*name))
      r.bad(t.get("name")->source(), T,
            "'name' must be non-empty, without spaces or control characters");
    m.name = *name;
  }
  m.where = fmt::format("{}: {}", r.at(t.source()), T);
  r.only_keys(t, T,
              {"name", "path", "max_seqs", "max_batched_tokens", "ctx", "kv_dtype", "chat_template",
               "tool_call_parser", "pooling", "draft", "spec_k", "price_input", "price_output",
               "price_cached", "sha256", "quantization", "memory_share"});
  if (!name) r.bad(t.source(), T, "missing the required key 'name' (the model id clients send)");
  const auto path = r.str(t, T, "path");
  if (!path) r.bad(t.source(), T, "missing the required key 'path' (a GGUF file or HF folder)");
  if (path->empty()) r.bad(t.get("path")->source(), T, "'path' is empty");
  m.path = r.resolve(*path);

  constexpr int kMax = std::numeric_limits<int>::max();
  m.max_seqs = r.integer(t, T, "max_seqs", 1, kMax);
  m.max_batched_tokens = r.integer(t, T, "max_batched_tokens", 1, kMax);
  m.ctx = r.integer(t, T, "ctx", 0, kMax);
  if ((m.kv_dtype = r.str(t, T, "kv_dtype")) && !kv_dtype_from_name(*m.kv_dtype))
    r.bad(t.get("kv_dtype")->source(), T, "unknown kv_dtype '{}' (expected {})", *m.kv_dtype,
          kv_dtype_choices());
  if ((m.chat_template = r.str(t, T, "chat_template"))) {
    if (m.chat_template->empty())
      r.bad(t.get("chat_template")->source(), T, "'chat_template' is empty");
    m.chat_template = r.resolve_if_file(*m.chat_template);
  }
  if ((m.tool_call_parser = r.str(t, T, "tool_call_parser")) &&
      !tool_family_from_name(*m.tool_call_parser))
    r.bad(t.get("tool_call_parser")->source(), T,
          "unknown tool_call_parser '{}' (expected hermes, llama3, mistral, mistral-v11, granite, "
          "deepseek or none)",
          *m.tool_call_parser);
  if ((m.pooling = r.str(t, T, "pooling")) && !parse_pooling(*m.pooling))
    r.bad(t.get("pooling")->source(), T, "unknown pooling '{}' (expected mean, cls, last or none)",
          *m.pooling);
  if (auto d = r.str(t, T, "draft")) {
    if (d->empty()) r.bad(t.get("draft")->source(), T, "'draft' is empty");
    m.draft = r.resolve(*d);
  }
  if (const toml::node* n = t.get("spec_k")) {
    if (n->is_integer()) {
      const int64_t k = n->as_integer()->get();
      if (k < 1 || k > 32)
        r.bad(n->source(), T, "'spec_k' must be in 1..32 or \"auto\", got {}", k);
      m.spec_k = std::to_string(k);
    } else if (n->is_string() && n->as_string()->get() == "auto") {
      m.spec_k = "auto";
    } else {
      r.bad(n->source(), T, "'spec_k' must be an integer in 1..32 or \"auto\", got {}{}",
            type_name(*n), n->is_string() ? " '" + n->as_string()->get() + "'" : "");
    }
  }
  m.price_input = r.number(t, T, "price_input", 0);
  m.price_output = r.number(t, T, "price_output", 0);
  m.price_cached = r.number(t, T, "price_cached", 0);
  if (auto h = r.str(t, T, "sha256")) {
    if (!is_sha256_hex(*h))
      r.bad(t.get("sha256")->source(), T, "'sha256' must be 64 hex digits, got '{}' ({} chars)", *h,
            h->size());
    std::transform(h->begin(), h->end(), h->begin(),
                   [](char c) { return c >= 'A' && c <= 'F' ? static_cast<char>(c + 32) : c; });
    m.sha256 = *h;
  }
  if (auto q = r.str(t, T, "quantization")) {
    std::string lower = *q;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
    const auto dt = dtype_from_name(lower);
    if (!dt)
      r.bad(t.get("quantization")->source(), T,
            "unknown quantization '{}' (expected a weight dtype name as kvasir inspect prints it, "
            "e.g. f16, bf16, q8_0, q4_0, q4_k)",
            *q);
    m.quantization = std::string(dtype_name(*dt));
  }
  m.memory_share = r.number(t, T, "memory_share", 0, 1.0, /*lo_exclusive=*/true);
  return m;
}

RoutePolicy read_route(const Reader& r, const toml::table& t, size_t index) {
  RoutePolicy p;
  std::string T = fmt::format("[[route]] #{}", index + 1);
  const auto name = r.str(t, T, "name");
  if (name) p.name = *name;  // else RoutePolicy's default
  T += fmt::format(" (name '{}')", p.name);
  if (name && bad_name(*name))
    r.bad(t.get("name")->source(), T,
          "'name' must be non-empty, without spaces or control characters");
  r.only_keys(t, T,
              {"name", "small", "large", "max_small_prompt_tokens", "max_small_difficulty",
               "fallover_waiting", "keys"});
  const auto small = r.str(t, T, "small");
  if (!small) r.bad(t.source(), T, "missing the required key 'small' (a [[model]] name)");
  const auto large = r.str(t, T, "large");
  if (!large) r.bad(t.source(), T, "missing the required key 'large' (a [[model]] name)");
  p.small = *small;
  p.large = *large;
  if (p.small == p.large)
    r.bad(t.get("large")->source(), T,
          "'small' and 'large' are both '{}': a route needs two models", p.small);
  constexpr int kMax = std::numeric_limits<int>::max();
  p.max_small_prompt_tokens = r.integer(t, T, "max_small_prompt_tokens", 0, kMax).value_or(0);
  p.max_small_difficulty = r.number(t, T, "max_small_difficulty", 0).value_or(0);
  p.fallover_waiting = r.integer(t, T, "fallover_waiting", 0, kMax).value_or(1);
  if (const toml::node* n = t.get("keys")) {
    if (!n->is_table())
      r.bad(n->source(), T,
            "'keys' must be a table ([route.keys]: label = \"small\" | \"large\" | "
            "\"auto\"), got {}",
            type_name(*n));
    for (auto&& [k, v] : *n->as_table()) {
      const std::string label(k.str());
      if (!v.is_string())
        r.bad(v.source(), T,
              "key policy '{}' must be a string (\"small\", \"large\" or \"auto\"), got {}", label,
              type_name(v));
      const std::string& choice = v.as_string()->get();
      if (choice != "small" && choice != "large" && choice != "auto")
        r.bad(v.source(), T, "key policy '{}' = '{}': expected \"small\", \"large\" or \"auto\"",
              label, choice);
      p.keys[label] = choice;
    }
  }
  return p;
}

// Cross-references: distinct names, routes naming models of the file, memory shares.
void check_references(const Reader& r, const toml::table& root, ServeConfigFile& c) {
  std::map<std::string, size_t> model_index;
  for (size_t i = 0; i < c.models.size(); ++i) {
    auto [it, fresh] = model_index.emplace(c.models[i].name, i);
    if (!fresh)
      fail("{}: duplicate model name '{}' (also [[model]] #{})", c.models[i].where,
           c.models[i].name, it->second + 1);
  }
  const toml::array* routes = root.get_as<toml::array>("route");
  std::set<std::string> route_names;
  for (size_t i = 0; i < c.routes.size(); ++i) {
    const RoutePolicy& p = c.routes[i];
    const toml::table& t = *routes->get(i)->as_table();
    const std::string T = fmt::format("[[route]] #{} (name '{}')", i + 1, p.name);
    const toml::node* name_node = t.get("name");
    const toml::source_region& name_at = name_node ? name_node->source() : t.source();
    if (!route_names.insert(p.name).second) r.bad(name_at, T, "duplicate route name '{}'", p.name);
    if (auto it = model_index.find(p.name); it != model_index.end())
      r.bad(name_at, T,
            "route name '{}' is also a model's name ([[model]] #{}); clients could not "
            "tell them apart",
            p.name, it->second + 1);
    for (auto [key, value] : {std::pair{"small", &p.small}, std::pair{"large", &p.large}})
      if (!model_index.count(*value)) {
        std::string names;
        for (const ModelEntry& m : c.models) names += (names.empty() ? "'" : ", '") + m.name + "'";
        r.bad(t.get(key)->source(), T, "'{}' names model '{}', which no [[model]] defines ({})",
              key, *value, names.empty() ? "there are none" : "the models: " + names);
      }
  }
  double shares = 0;
  for (const ModelEntry& m : c.models) shares += m.memory_share.value_or(0);
  if (shares > 1 + 1e-9)
    fail("{}: the models' memory_share values sum to {} (at most 1 is allowed)", r.source(),
         shares);
}

}  // namespace

ServeConfigFile parse_serve_config(std::string_view text, const std::string& source_name,
                                   const std::filesystem::path& base_dir,
                                   const std::vector<std::string>& other_sections) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    if (b.line > 0) fail("{}:{}:{}: {}", source_name, b.line, b.column, e.description());
    fail("{}: {}", source_name, e.description());
  }
  const Reader r(source_name, base_dir);
  ServeConfigFile c;
  c.source = source_name;
  // Top-level `name = value` keys and [SECTION] tables named for a kvasir command are command-line
  // options (the --config mechanism every command has reads and checks them); the rest is ours.
  toml::table ours;
  for (auto&& [k, v] : root) {
    if (!v.is_table() && !v.is_array_of_tables()) continue;
    if (v.is_table() &&
        std::find(other_sections.begin(), other_sections.end(), k.str()) != other_sections.end())
      continue;
    ours.insert(k, v);
  }
  r.only_keys(ours, "top level", {"server", "require", "model", "route"});
  if (const toml::table* s = r.table_at(root, "server")) read_server(r, *s, c.server);
  if (const toml::table* q = r.table_at(root, "require")) {
    r.only_keys(*q, "[require]", {"engine"});
    if (auto e = r.str(*q, "[require]", "engine"))
      c.require_engine = VersionRange::parse(
          *e, fmt::format("{}: require.engine", r.at(q->get("engine")->source())));
  }
  for (const char* array : {"model", "route"}) {
    const toml::node* n = root.get(array);
    if (!n) continue;
    if (!n->is_array_of_tables())
      r.bad(n->source(), "top level", "'{}' must be an array of tables ([[{}]]), got {}", array,
            array, type_name(*n));
    const toml::array& a = *n->as_array();
    for (size_t i = 0; i < a.size(); ++i) {
      const toml::table& t = *a.get(i)->as_table();
      if (array == std::string_view("model"))
        c.models.push_back(read_model(r, t, i));
      else
        c.routes.push_back(read_route(r, t, i));
    }
  }
  check_references(r, root, c);
  return c;
}

ServeConfigFile load_serve_config(const std::string& path,
                                  const std::vector<std::string>& other_sections) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the config file: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: cannot read the config file", path);
  return parse_serve_config(ss.str(), path, fs::path(path).parent_path(), other_sections);
}

}  // namespace kvasir::server
