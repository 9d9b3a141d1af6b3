// Unit tests of the template language that Jinja2 cannot check for us: error locations,
// resource limits against hostile templates, reuse across threads, the chat helpers, and a few
// readable examples of the whitespace and scoping rules (the full comparison against Jinja2 is
// in expectations_test.cc).
#include <gtest/gtest.h>
#include <pthread.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kvasir/chat/chat_template.h"

namespace kvasir::chat {
namespace {

std::string render(const std::string& src, const Json& ctx = Json::object(),
                   const RenderOptions& opts = {}) {
  return ChatTemplate::parse(src).render(ctx, opts);
}

TemplateError render_error(const std::string& src, const Json& ctx = Json::object(),
                           const RenderOptions& opts = {}) {
  try {
    std::string out = render(src, ctx, opts);
    ADD_FAILURE() << "expected an error, got: " << out;
  } catch (const TemplateError& e) {
    return e;
  }
  return TemplateError(ErrorKind::Runtime, "no error");
}

// ---- whitespace and scoping (readable examples) ----

TEST(ChatTemplateLanguage, TrimAndLstripBlocks) {
  // The block tags vanish with their line's indentation and the newline after them.
  EXPECT_EQ(render("<ul>\n  {% for x in [1, 2] %}\n  <li>{{ x }}</li>\n  {% endfor %}\n</ul>"),
            "<ul>\n  <li>1</li>\n  <li>2</li>\n</ul>");
  // Variable tags are not lstripped; "-" strips all whitespace on its side, newlines included.
  EXPECT_EQ(render("  {{ 'a' }}\n  {{- 'b' -}}  \n c"), "  abc");
  // "+" keeps what lstrip_blocks/trim_blocks would remove.
  EXPECT_EQ(render("x\n  {%+ if true +%}\ny{% endif %}"), "x\n  \ny");
}

TEST(ChatTemplateLanguage, LoopScopeDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(render("{% set n = 0 %}{% for i in [1, 2, 3] %}{% set n = n + i %}{% endfor %}{{ n }}"),
            "0");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "6");
}

TEST(ChatTemplateLanguage, MacroSpecialNamesAreFoundInNestedExpressions) {
  // A macro takes extra positional/keyword arguments (or a caller) only if its body names
  // varargs/kwargs/caller, wherever that is: deep in an expression, in a loop, in a nested macro.
  // Expected outputs are Jinja2 3.1.6's.
  EXPECT_EQ(render("{% macro m(a) %}{% if a %}{{ a ~ ':' ~ (varargs|map('string')|join('-')) }}"
                   "{% endif %}{% endmacro %}{{ m(1, 2, 3) }}"),
            "1:2-3");
  EXPECT_EQ(render("{% macro m() %}{% for x in [1] %}{{ {'k': [varargs[0] + x]} }}{% endfor %}"
                   "{% endmacro %}{{ m(1, 2) }}"),
            "{'k': [2]}");
  EXPECT_EQ(render("{% macro m() %}{{ kwargs['k'] if true }}{% endmacro %}{{ m(k='v') }}"), "v");
  EXPECT_EQ(
      render("{% macro m() %}{{ [caller()|upper] }}{% endmacro %}{% call m() %}x{% endcall %}"),
      "['X']");
  EXPECT_EQ(render("{% macro outer() %}{% macro inner() %}{{ varargs }}{% endmacro %}{{ inner(5) }}"
                   "{% endmacro %}{{ outer(1) }}"),
            "(5,)");
  EXPECT_EQ(render_error("{% macro m() %}{{ 1 }}{% endmacro %}{{ m(1) }}").message(),
            "macro 'm' takes not more than 0 argument(s)");
}

TEST(ChatTemplateLanguage, UndefinedPrintsEmptyButFailsOnUse) {
  EXPECT_EQ(render("[{{ missing }}][{{ missing is defined }}][{{ missing|default('d') }}]"),
            "[][False][d]");
  TemplateError e = render_error("{{ missing.attr }}");
  EXPECT_EQ(e.kind(), ErrorKind::Undefined);
  EXPECT_EQ(e.message(), "'missing' is undefined");
}

TEST(ChatTemplateLanguage, PythonValueFormatting) {
  Json ctx =
      Json::parse(R"({"i": 1, "f": 1.0, "big": 1e300, "tiny": 1e-7, "l": ["a", 1, null, true]})");
  EXPECT_EQ(render("{{ i }} {{ f }} {{ big }} {{ tiny }} {{ l }} {{ i / 2 }}", ctx),
            "1 1.0 1e+300 1e-07 ['a', 1, None, True] 0.5");
}

TEST(ChatTemplateLanguage, JsonKeyOrderIsPreserved) {
  Json ctx = Json::parse(R"({"tool": {"z": 1, "a": {"y": 2, "b": 3}}})");
  EXPECT_EQ(render("{{ tool|tojson }}|{% for k in tool %}{{ k }}{% endfor %}", ctx),
            R"({"z": 1, "a": {"y": 2, "b": 3}}|za)");
}

TEST(ChatTemplateLanguage, InvalidUtf8RoundTripsByteExactly) {
  std::string bytes = "ok \xff\xfe end \xc3";  // not valid UTF-8
  Json ctx = Json::object();
  ctx["s"] = bytes;  // nlohmann stores the bytes as given
  EXPECT_EQ(render("{{ s }}|{{ s[3:5] }}", ctx), bytes + "|\xff\xfe");
}

// ---- errors: kinds, messages, locations ----

TEST(ChatTemplateErrors, SyntaxErrorsCarryLineAndColumn) {
  try {
    ChatTemplate::parse("line one\n  {{ 1 + }}\n");
    FAIL() << "expected a syntax error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Syntax);
    EXPECT_EQ(e.line(), 2);
    EXPECT_EQ(e.column(), 10);  // at "}}"
    EXPECT_NE(std::string(e.what()).find("line 2, column 10"), std::string::npos) << e.what();
  }
  try {
    ChatTemplate::parse("{% for m in messages %}\n{{ m|no_such_filter }}\n{% endfor %}");
    FAIL() << "expected a syntax error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_EQ(e.message(), "No filter named 'no_such_filter'.");
  }
  try {
    ChatTemplate::parse("{% if x %}\n{% for y in z %}\n");
    FAIL() << "expected a syntax error";
  } catch (const TemplateError& e) {
    EXPECT_NE(e.message().find("'endfor' or 'else'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("innermost block that needs to be closed is 'for'"),
              std::string::npos)
        << e.message();
  }
}

TEST(ChatTemplateErrors, RaiseExceptionIsAClearError) {
  const std::string src =
      "{% for m in messages %}\n"
      "{% if m.role not in ['user', 'assistant'] %}\n"
      "{{ raise_exception('Unsupported role: ' + m.role) }}\n"
      "{% endif %}{% endfor %}";
  Json ctx = {{"messages", Json::array({{{"role", "user"}}, {{"role", "robot"}}})}};
  TemplateError e = render_error(src, ctx);
  EXPECT_EQ(e.kind(), ErrorKind::Raised);
  EXPECT_EQ(e.message(), "Unsupported role: robot");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(std::string(e.what()).find("Unsupported role: robot"), std::string::npos);
  // It is a kvasir::Error, so the CLI and server report it like any other input error.
  try {
    render(src, ctx);
  } catch (const kvasir::Error& err) {
    SUCCEED();
  }
}

TEST(ChatTemplateErrors, RuntimeErrorsCarryTheirLine) {
  TemplateError e = render_error("a\nb\n{{ 'x' + 1 }}");
  EXPECT_EQ(e.kind(), ErrorKind::Type);
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.message(), "can only concatenate str (not \"int\") to str");
}

TEST(ChatTemplateErrors, SandboxRefusesMutation) {
  TemplateError e = render_error("{% set l = [] %}{{ l.append(1) }}");
  EXPECT_EQ(e.kind(), ErrorKind::Security);
  EXPECT_EQ(e.message(), "access to attribute 'append' of 'list' object is unsafe.");
}

TEST(ChatTemplateErrors, ContextMustBeAnObject) {
  EXPECT_THROW(ChatTemplate::parse("x").render(Json::array()), TemplateError);
}

// ---- hostile templates: every limit ends in a clear error, never a crash or a hang ----

TEST(ChatTemplateLimits, InfiniteMacroRecursion) {
  TemplateError e = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
  EXPECT_NE(std::string(e.what()).find("too deep"), std::string::npos) << e.what();
}

// The depth limit must stop runaway recursion long before the stack runs out, even on a thread
// with a small stack (server worker threads are not the 8 MiB main thread).
TEST(ChatTemplateLimits, RecursionFitsInASmallThreadStack) {
#if defined(__SANITIZE_ADDRESS__)
  constexpr size_t kStack = size_t{16} << 20;  // ASan frames are several times larger
#else
  constexpr size_t kStack = size_t{1} << 20;
#endif
  struct Job {
    std::string src;
    ErrorKind kind = ErrorKind::Runtime;
    bool threw = false;
  };
  auto run = [](void* arg) -> void* {
    auto* job = static_cast<Job*>(arg);
    try {
      render(job->src);
    } catch (const TemplateError& e) {
      job->threw = true;
      job->kind = e.kind();
    }
    return nullptr;
  };
  for (const char* src :
       {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% macro f(n) %}{% if true %}{% for x in [1] %}{% set y %}{{ f(n + 1)|trim }}{% endset %}"
        "{{ y }}{% endfor %}{% endif %}{% endmacro %}{{ f(0) }}",
        "{% macro f(n) %}{% call(x) f(n + 1) %}{{ caller(x) }}{% endcall %}{% endmacro %}{{ f(0) "
        "}}",
        "{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}"}) {
    Job job{src};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kStack);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, &attr, run, &job), 0);
    pthread_join(th, nullptr);
    pthread_attr_destroy(&attr);
    EXPECT_TRUE(job.threw) << src;
    EXPECT_EQ(job.kind, ErrorKind::Limit) << src;
  }
}

TEST(ChatTemplateLimits, InfiniteRecursiveLoop) {
  TemplateError e = render_error("{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}");
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
}

TEST(ChatTemplateLimits, DeeplyNestedSourceIsASyntaxError) {
  for (const std::string& src :
       {"{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}",
        "{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}",
        "{{ " + std::string(20000, '-') + "1 }}",
        "{{ " +
            [] {
              std::string s;
              for (int i = 0; i < 5000; ++i) s += "not ";
              return s;
            }() +
            "x }}",
        [] {
          std::string s;
          for (int i = 0; i < 3000; ++i) s += "{% if true %}";
          return s;
        }()}) {
    try {
      ChatTemplate::parse(src);
      ADD_FAILURE() << "expected a nesting error";
    } catch (const TemplateError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Syntax);
      EXPECT_NE(e.message().find("nesting is too deep"), std::string::npos) << e.message();
    }
  }
}

TEST(ChatTemplateLimits, DeeplyNestedValues) {
  // Each step wraps the previous list; nesting is capped far below what would hurt the stack.
  TemplateError e = render_error(
      "{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}"
      "{% endfor %}{{ ns.v }}");
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
}

TEST(ChatTemplateLimits, SelfReferentialNamespace) {
  TemplateError e = render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
}

TEST(ChatTemplateLimits, OutputSize) {
  RenderOptions opts;
  opts.max_output_bytes = 1 << 20;
  TemplateError e =
      render_error("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", Json::object(), opts);
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
  // A huge string is refused before it is allocated.
  e = render_error("{{ 'x' * 1000000000000 }}");
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
  e = render_error("{{ [1, 2] * 1000000000000 }}");
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
}

TEST(ChatTemplateLimits, WorkBudgetStopsRunawayLoops) {
  const std::string runaway =
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  // With the default budget a runaway template is stopped within about a second.
  auto start = std::chrono::steady_clock::now();
  TemplateError e = render_error(runaway);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
#else
  RenderOptions opts;  // unoptimized builds are ~100x slower: a smaller budget
  opts.max_steps = 200'000;
  TemplateError e = render_error(runaway, Json::object(), opts);
#endif
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
  EXPECT_NE(std::string(e.what()).find("steps"), std::string::npos) << e.what();
  RenderOptions small;
  small.max_steps = 1000;
  e = render_error("{% for i in range(10000) %}{{ i }}{% endfor %}", Json::object(), small);
  EXPECT_EQ(e.kind(), ErrorKind::Limit);
  // A realistic long conversation stays far below the default budget.
  Json msgs = Json::array();
  for (int i = 0; i < 1000; ++i)
    msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(200, 'x')}});
  EXPECT_NO_THROW(
      render("{% for m in messages %}{% if m.role == 'user' %}<|user|>{% else %}"
             "<|assistant|>{% endif %}{{ m.content|trim }}\n{% endfor %}",
             {{"messages", msgs}}));
}

TEST(ChatTemplateLimits, SandboxRangeLimit) {
  TemplateError e = render_error("{% for i in range(1000000) %}{% endfor %}");
  EXPECT_EQ(e.kind(), ErrorKind::Overflow);
}

// ---- reuse, threads, helpers ----

TEST(ChatTemplate, ParseOnceRenderConcurrently) {
  ChatTemplate t = ChatTemplate::parse(
      "{%- set ns = namespace(n=0) -%}"
      "{%- for m in messages -%}{%- set ns.n = ns.n + 1 -%}"
      "<|{{ m.role }}|>{{ m.content|trim }}{{ eos_token }}\n{%- endfor -%}"
      "{{ ns.n }}{% if add_generation_prompt %}<|assistant|>{% endif %}");
  auto ctx_for = [](int k) {
    Json msgs = Json::array();
    for (int i = 0; i <= k % 5; ++i)
      msgs.push_back({{"role", "user"}, {"content", " m" + std::to_string(i)}});
    return chat_context(msgs, k % 2 == 0, "<s>", "</s>");
  };
  std::vector<std::string> expected;
  for (int k = 0; k < 10; ++k) expected.push_back(t.render(ctx_for(k)));
  EXPECT_EQ(expected[1], "<|user|>m0</s><|user|>m1</s>2");
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int k = 0; k < 200; ++k)
        if (t.render(ctx_for(k % 10)) != expected[k % 10]) ++mismatches[w];
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(ChatTemplate, ApplyChatTemplateMatchesTransformersContext) {
  const std::string src =
      "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
      "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
      "[{{ tools is none }}{{ documents is none }}{{ enable_thinking }}]";
  Json msgs = Json::parse(R"([{"role": "user", "content": "Hi"}])");
  EXPECT_EQ(
      apply_chat_template(src, msgs, true, "<s>", "</s>", nullptr, {{"enable_thinking", false}}),
      "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n[TrueTrueFalse]");
  EXPECT_EQ(apply_chat_template(src, msgs, false, "", ""),
            "<|im_start|>user\nHi<|im_end|>\n[TrueTrue]");
}

TEST(ChatTemplate, StrftimeNowIsInjectable) {
  RenderOptions opts;
  opts.now = 1721986200;  // 2024-07-26 09:30:00 UTC
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %b %Y') }}",
                   Json::object(), opts),
            "2024-07-26 09:30|26 Jul 2024");
  ::setenv("KVASIR_TEMPLATE_NOW", "0", 1);
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }}"), "1970-01-01");
  ::setenv("KVASIR_TEMPLATE_NOW", "not-a-number", 1);
  EXPECT_THROW(render("{{ strftime_now('%Y') }}"), TemplateError);
  ::unsetenv("KVASIR_TEMPLATE_NOW");
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
}

TEST(ChatTemplate, KeepsSource) {
  EXPECT_EQ(ChatTemplate::parse("{{ 1 }}").source(), "{{ 1 }}");
}

}  // namespace
}  // namespace kvasir::chat
