// server/serve_config.h: the header's full example parses into the expected structs (paths
// resolved against the config's folder, pins normalized, the route policy filled), and every
// kind of mistake is refused with a message naming the file, line:column, table and key.
#include "kvasir/server/serve_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kvasir/util/error.h"
#include "test_util/files.h"

namespace kvasir::server {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFullExample = R"(# kvasir.toml
[server]
host = "0.0.0.0"
port = 9000
memory = "8GiB"
api_key_file = "keys.txt"
max_queue = 128
threads = 2

[require]
engine = ">=0.1, <0.2"

[[model]]
name = "small"
path = "models/small.gguf"
max_seqs = 32
max_batched_tokens = 256
ctx = 2048
kv_dtype = "int8"
chat_template = "chatml"
tool_call_parser = "hermes"
pooling = "mean"
draft = "draft.gguf"
spec_k = "auto"
price_input = 0.10
price_output = 1
price_cached = 0.05
sha256 = "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"
quantization = "Q8_0"
memory_share = 0.25

[[model]]
name = "large"
path = "/abs/large.gguf"
spec_k = 8
memory_share = 0.75

[[route]]
name = "auto"
small = "small"
large = "large"
max_small_prompt_tokens = 512
max_small_difficulty = 2.5
fallover_waiting = 3
[route.keys]
key1 = "large"
key2 = "small"
team-b = "auto"
)";

// The message parse_serve_config throws for `text`, or "(no error)".
std::string error_of(const std::string& text, const fs::path& base = "/etc/kvasir") {
  try {
    parse_serve_config(text, "kvasir.toml", base);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Two models and a route, valid; tests append or replace lines to break one thing.
constexpr const char* kTwoModels = R"([[model]]
name = "small"
path = "a.gguf"

[[model]]
name = "large"
path = "b.gguf"
)";

TEST(ServeConfig, FullExampleParses) {
  const ServeConfigFile c = parse_serve_config(kFullExample, "kvasir.toml", "/etc/kvasir");
  EXPECT_EQ(c.source, "kvasir.toml");
  EXPECT_EQ(c.server.host, "0.0.0.0");
  EXPECT_EQ(c.server.port, 9000);
  EXPECT_EQ(c.server.memory, "8GiB");
  EXPECT_EQ(c.server.memory_bytes, int64_t{8} << 30);
  EXPECT_EQ(c.server.api_key_file, "/etc/kvasir/keys.txt");
  EXPECT_EQ(c.server.max_queue, 128);
  EXPECT_EQ(c.server.threads, 2);

  ASSERT_TRUE(c.require_engine);
  EXPECT_EQ(c.require_engine->text(), ">=0.1, <0.2");
  EXPECT_TRUE(c.require_engine->contains({0, 1, 7}));
  EXPECT_FALSE(c.require_engine->contains({0, 2, 0}));

  ASSERT_EQ(c.models.size(), 2u);
  const ModelEntry& s = c.models[0];
  EXPECT_EQ(s.name, "small");
  EXPECT_EQ(s.path, "/etc/kvasir/models/small.gguf");
  EXPECT_EQ(s.max_seqs, 32);
  EXPECT_EQ(s.max_batched_tokens, 256);
  EXPECT_EQ(s.ctx, 2048);
  EXPECT_EQ(s.kv_dtype, "int8");
  EXPECT_EQ(s.chat_template, "chatml");  // no such file next to the config: a built-in name
  EXPECT_EQ(s.tool_call_parser, "hermes");
  EXPECT_EQ(s.pooling, "mean");
  EXPECT_EQ(s.draft, "/etc/kvasir/draft.gguf");
  EXPECT_EQ(s.spec_k, "auto");
  EXPECT_DOUBLE_EQ(s.price_input.value_or(-1), 0.10);
  EXPECT_DOUBLE_EQ(s.price_output.value_or(-1), 1.0);  // an integer is a number too
  EXPECT_DOUBLE_EQ(s.price_cached.value_or(-1), 0.05);
  EXPECT_EQ(s.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(s.quantization, "q8_0");  // as dtype_name prints it
  EXPECT_DOUBLE_EQ(s.memory_share.value_or(-1), 0.25);
  EXPECT_EQ(s.where, "kvasir.toml:13:1: [[model]] #1 (name 'small')");

  const ModelEntry& l = c.models[1];
  EXPECT_EQ(l.name, "large");
  EXPECT_EQ(l.path, "/abs/large.gguf");  // absolute: kept
  EXPECT_EQ(l.spec_k, "8");
  EXPECT_FALSE(l.max_seqs);  // unset: kvasir serve's flag or default
  EXPECT_FALSE(l.sha256);
  EXPECT_FALSE(l.price_input);

  ASSERT_EQ(c.routes.size(), 1u);
  const RoutePolicy& r = c.routes[0];
  EXPECT_EQ(r.name, "auto");
  EXPECT_EQ(r.small, "small");
  EXPECT_EQ(r.large, "large");
  EXPECT_EQ(r.max_small_prompt_tokens, 512);
  EXPECT_DOUBLE_EQ(r.max_small_difficulty, 2.5);
  EXPECT_EQ(r.fallover_waiting, 3);
  EXPECT_EQ(r.keys, (std::map<std::string, std::string>{
                        {"key1", "large"}, {"key2", "small"}, {"team-b", "auto"}}));
}

TEST(ServeConfig, EverythingIsOptionalAndRouteDefaultsAreRoutePolicys) {
  const ServeConfigFile empty = parse_serve_config("", "kvasir.toml", "");
  EXPECT_FALSE(empty.server.port);
  EXPECT_FALSE(empty.require_engine);
  EXPECT_TRUE(empty.models.empty());
  EXPECT_TRUE(empty.routes.empty());

  const ServeConfigFile c = parse_serve_config(
      std::string(kTwoModels) + "[[route]]\nsmall = \"small\"\nlarge = \"large\"\n", "k.toml", "");
  ASSERT_EQ(c.routes.size(), 1u);
  const RoutePolicy defaults;
  EXPECT_EQ(c.routes[0].name, defaults.name);
  EXPECT_EQ(c.routes[0].max_small_prompt_tokens, defaults.max_small_prompt_tokens);
  EXPECT_EQ(c.routes[0].max_small_difficulty, defaults.max_small_difficulty);
  EXPECT_EQ(c.routes[0].fallover_waiting, defaults.fallover_waiting);
  EXPECT_TRUE(c.routes[0].keys.empty());
  EXPECT_EQ(c.models[0].path, "a.gguf");  // no base folder: as written
  // memory as bytes
  EXPECT_EQ(parse_serve_config("[server]\nmemory = 1048576\n", "k.toml", "").server.memory_bytes,
            1048576);
}

TEST(ServeConfig, UnknownKeysAreRefusedWithWhereAndASuggestion) {
  EXPECT_EQ(error_of(std::string(kTwoModels) + "prce_input = 0.1\n"),
            "kvasir.toml:8:1: [[model]] #2 (name 'large'): unknown key 'prce_input' (did you mean "
            "'price_input'?)");
  EXPECT_EQ(error_of("[server]\nport = 1\nzzz = 2\n"),
            "kvasir.toml:3:1: [server]: unknown key 'zzz' (expected one of: host, port, memory, "
            "api_key_file, max_queue, threads)");
  EXPECT_EQ(error_of("[servr]\nport = 1\n"),
            "kvasir.toml:1:2: top level: unknown key 'servr' (did you mean 'server'?)");
  EXPECT_EQ(error_of("[require]\nengines = \"0.1\"\n"),
            "kvasir.toml:2:1: [require]: unknown key 'engines' (did you mean 'engine'?)");
  EXPECT_EQ(error_of(std::string(kTwoModels) +
                     "[[route]]\nsmall = \"small\"\nlarge = \"large\"\nfallover = 2\n"),
            "kvasir.toml:11:1: [[route]] #1 (name 'auto'): unknown key 'fallover' (expected one "
            "of: name, small, large, max_small_prompt_tokens, max_small_difficulty, "
            "fallover_waiting, keys)");
}

TEST(ServeConfig, WrongTypesAreRefused) {
  EXPECT_EQ(error_of("[server]\nport = \"8080\"\n"),
            "kvasir.toml:2:8: [server]: 'port' must be an integer, got a string");
  EXPECT_EQ(
      error_of("[[model]]\nname = \"m\"\npath = \"a.gguf\"\nmax_seqs = 1.5\n"),
      "kvasir.toml:4:12: [[model]] #1 (name 'm'): 'max_seqs' must be an integer, got a float");
  EXPECT_EQ(error_of("[[model]]\nname = \"m\"\npath = \"a.gguf\"\nprice_input = \"cheap\"\n"),
            "kvasir.toml:4:15: [[model]] #1 (name 'm'): 'price_input' must be a number, got a "
            "string");
  EXPECT_EQ(error_of("[[model]]\nname = 7\n"),
            "kvasir.toml:2:8: [[model]] #1: 'name' must be a string, got an integer");
  // Top-level keys and [COMMAND] tables are command-line options: the CLI's --config reads them.
  EXPECT_EQ(error_of("port = 8080\nmax_seqs = 4\n"), "(no error)");
  EXPECT_EQ(error_of("server = 1\n"),
            "kvasir.toml:1:10: top level: 'server' must be a table ([server]), got an integer");
  EXPECT_EQ(parse_serve_config("port = 1\n[serve]\nport = 2\n[[model]]\nname = \"m\"\npath = "
                               "\"m.gguf\"\n",
                               "k.toml", "", {"serve", "run"})
                .models.size(),
            1u);
  EXPECT_NE(error_of("[serve]\nport = 2\n").find("top level: unknown key 'serve'"),
            std::string::npos);
  EXPECT_EQ(error_of("[model]\nname = \"m\"\n"),
            "kvasir.toml:1:1: top level: 'model' must be an array of tables ([[model]]), got a "
            "table");
  EXPECT_EQ(error_of(std::string(kTwoModels) +
                     "[[route]]\nsmall = \"small\"\nlarge = \"large\"\nkeys = [\"a\"]\n"),
            "kvasir.toml:11:8: [[route]] #1 (name 'auto'): 'keys' must be a table ([route.keys]: "
            "label = \"small\" | \"large\" | \"auto\"), got an array");
  EXPECT_EQ(error_of("[server]\nmemory = true\n"),
            "kvasir.toml:2:10: [server]: 'memory' must be a size string (e.g. \"8GiB\") or "
            "bytes, got a boolean");
}

TEST(ServeConfig, RequiredKeysAndDuplicates) {
  EXPECT_EQ(error_of("[[model]]\npath = \"a.gguf\"\n"),
            "kvasir.toml:1:1: [[model]] #1: missing the required key 'name' (the model id "
            "clients send)");
  EXPECT_EQ(error_of("[[model]]\nname = \"m\"\n"),
            "kvasir.toml:1:1: [[model]] #1 (name 'm'): missing the required key 'path' (a GGUF "
            "file or HF folder)");
  EXPECT_EQ(error_of("[[model]]\nname = \"my model\"\npath = \"a\"\n"),
            "kvasir.toml:2:8: [[model]] #1 (name 'my model'): 'name' must be non-empty, without "
            "spaces or control characters");
  EXPECT_EQ(error_of(std::string(kTwoModels) + "\n[[model]]\nname = \"small\"\npath = \"c\"\n"),
            "kvasir.toml:9:1: [[model]] #3 (name 'small'): duplicate model name 'small' (also "
            "[[model]] #1)");
  EXPECT_EQ(error_of(std::string(kTwoModels) +
                     "[[route]]\nsmall = \"small\"\nlarge = \"large\"\n[[route]]\nsmall = "
                     "\"large\"\nlarge = \"small\"\n"),
            "kvasir.toml:11:1: [[route]] #2 (name 'auto'): duplicate route name 'auto'");
  EXPECT_EQ(error_of(std::string(kTwoModels) + "[[route]]\nsmall = \"small\"\n"),
            "kvasir.toml:8:1: [[route]] #1 (name 'auto'): missing the required key 'large' (a "
            "[[model]] name)");
}

TEST(ServeConfig, RouteCrossReferences) {
  const std::string base = std::string(kTwoModels) + "[[route]]\nname = \"auto\"\n";
  EXPECT_EQ(error_of(base + "small = \"small\"\nlarge = \"huge\"\n"),
            "kvasir.toml:11:9: [[route]] #1 (name 'auto'): 'large' names model 'huge', which no "
            "[[model]] defines (the models: 'small', 'large')");
  EXPECT_EQ(error_of("[[route]]\nsmall = \"a\"\nlarge = \"b\"\n"),
            "kvasir.toml:2:9: [[route]] #1 (name 'auto'): 'small' names model 'a', which no "
            "[[model]] defines (there are none)");
  EXPECT_EQ(error_of(base + "small = \"small\"\nlarge = \"small\"\n"),
            "kvasir.toml:11:9: [[route]] #1 (name 'auto'): 'small' and 'large' are both 'small': "
            "a route needs two models");
  EXPECT_EQ(error_of(std::string(kTwoModels) +
                     "[[route]]\nname = \"large\"\nsmall = \"small\"\nlarge = \"large\"\n"),
            "kvasir.toml:9:8: [[route]] #1 (name 'large'): route name 'large' is also a model's "
            "name ([[model]] #2); clients could not tell them apart");
  EXPECT_EQ(error_of(base + "small = \"small\"\nlarge = \"large\"\n[route.keys]\nkey1 = \"big\"\n"),
            "kvasir.toml:13:8: [[route]] #1 (name 'auto'): key policy 'key1' = 'big': expected "
            "\"small\", \"large\" or \"auto\"");
  EXPECT_EQ(error_of(base + "small = \"small\"\nlarge = \"large\"\n[route.keys]\nkey1 = 1\n"),
            "kvasir.toml:13:8: [[route]] #1 (name 'auto'): key policy 'key1' must be a string "
            "(\"small\", \"large\" or \"auto\"), got an integer");
}

TEST(ServeConfig, BadValuesAreRefused) {
  const std::string m = "[[model]]\nname = \"m\"\npath = \"a.gguf\"\n";
  EXPECT_EQ(error_of("[require]\nengine = \">=0.1.x.y\"\n"),
            "kvasir.toml:2:10: require.engine: cannot parse '>=0.1.x.y': clause '>=0.1.x.y': more "
            "than 3 version parts (MAJOR.MINOR.PATCH)");
  EXPECT_EQ(error_of("[server]\nport = 70000\n"),
            "kvasir.toml:2:8: [server]: 'port' must be in 0..65535, got 70000");
  EXPECT_EQ(error_of("[server]\nmax_queue = -1\n"),
            "kvasir.toml:2:13: [server]: 'max_queue' must be at least 0, got -1");
  EXPECT_NE(error_of("[server]\nmemory = \"8 parsecs\"\n")
                .find("kvasir.toml:2:10: [server]: "
                      "'memory'"),
            std::string::npos)
      << error_of("[server]\nmemory = \"8 parsecs\"\n");
  EXPECT_EQ(error_of(m + "sha256 = \"abc\"\n"),
            "kvasir.toml:4:10: [[model]] #1 (name 'm'): 'sha256' must be 64 hex digits, got "
            "'abc' (3 chars)");
  EXPECT_NE(error_of(m + "quantization = \"q9_9\"\n")
                .find("[[model]] #1 (name 'm'): unknown quantization 'q9_9'"),
            std::string::npos);
  EXPECT_NE(error_of(m + "kv_dtype = \"f12\"\n").find("unknown kv_dtype 'f12' (expected "),
            std::string::npos);
  EXPECT_NE(error_of(m + "tool_call_parser = \"json\"\n").find("unknown tool_call_parser 'json'"),
            std::string::npos);
  EXPECT_EQ(error_of(m + "pooling = \"max\"\n"),
            "kvasir.toml:4:11: [[model]] #1 (name 'm'): unknown pooling 'max' (expected mean, "
            "cls, last or none)");
  EXPECT_EQ(error_of(m + "spec_k = \"fast\"\n"),
            "kvasir.toml:4:10: [[model]] #1 (name 'm'): 'spec_k' must be an integer in 1..32 or "
            "\"auto\", got a string 'fast'");
  EXPECT_EQ(error_of(m + "spec_k = 64\n"),
            "kvasir.toml:4:10: [[model]] #1 (name 'm'): 'spec_k' must be in 1..32 or \"auto\", "
            "got 64");
  EXPECT_EQ(error_of(m + "memory_share = 0\n"),
            "kvasir.toml:4:16: [[model]] #1 (name 'm'): 'memory_share' must be in (0, 1], got 0");
  EXPECT_EQ(error_of(m + "price_output = -1\n"),
            "kvasir.toml:4:16: [[model]] #1 (name 'm'): 'price_output' must be a number >= 0, got "
            "-1");
  EXPECT_EQ(error_of(m + "memory_share = 0.75\n[[model]]\nname = \"n\"\npath = \"b\"\n"
                         "memory_share = 0.5\n"),
            "kvasir.toml: the models' memory_share values sum to 1.25 (at most 1 is allowed)");
  // A TOML syntax error: toml++'s words, with the place.
  const std::string syntax = error_of("[server]\nport = \n");
  EXPECT_EQ(syntax.rfind("kvasir.toml:2:", 0), 0u) << syntax;
  EXPECT_EQ(error_of("[server]\nport = 1\nport = 2\n").rfind("kvasir.toml:3:", 0), 0u)
      << error_of("[server]\nport = 1\nport = 2\n");
}

TEST(ServeConfig, RelativePathsResolveAgainstTheConfigsFolder) {
  const fs::path dir = fs::path(test_util::temp_dir("kvasir-serve-config")) / "conf";
  fs::create_directories(dir / "templates");
  std::ofstream(dir / "templates" / "mine.jinja") << "{{ messages }}";
  const fs::path file = dir / "kvasir.toml";
  std::ofstream(file) << "[server]\napi_key_file = \"../keys.txt\"\n"
                         "[[model]]\nname = \"m\"\npath = \"models/m.gguf\"\n"
                         "chat_template = \"templates/mine.jinja\"\ndraft = \"/abs/d.gguf\"\n"
                         "[[model]]\nname = \"n\"\npath = \"./n\"\nchat_template = \"chatml\"\n";
  const ServeConfigFile c = load_serve_config(file.string());
  EXPECT_EQ(c.source, file.string());
  EXPECT_EQ(c.server.api_key_file, (dir.parent_path() / "keys.txt").string());
  ASSERT_EQ(c.models.size(), 2u);
  EXPECT_EQ(c.models[0].path, (dir / "models" / "m.gguf").string());
  EXPECT_EQ(c.models[0].chat_template, (dir / "templates" / "mine.jinja").string());
  EXPECT_EQ(c.models[0].draft, "/abs/d.gguf");
  EXPECT_EQ(c.models[1].path, (dir / "n").string());
  EXPECT_EQ(c.models[1].chat_template, "chatml");  // a built-in name stays one

  const std::string missing = (dir / "nope.toml").string();
  try {
    load_serve_config(missing);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(missing + ": cannot open the config file", 0), 0u)
        << e.what();
  }
  // Errors name the file as given.
  std::ofstream(file) << "[[model]]\nname = \"m\"\n";
  try {
    load_serve_config(file.string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(file.string() + ":1:1: [[model]] #1 (name 'm')", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace kvasir::server
