// Hostile templates against the engine's resource limits (see kvasir/chat/limits.h): every way a
// template can ask for far more memory, time or stack than its own size — format widths and
// precisions, repetition, padding, values that share storage, long chains of operators, scans of
// long strings in loops — must end in a clear TemplateError, quickly, and before the memory is
// allocated. Parsing and rendering run on threads with small stacks, so a regression to unbounded
// recursion shows up as a crash of this test binary.
#include <gtest/gtest.h>
#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kvasir/chat/chat_template.h"
#include "kvasir/chat/parser.h"

namespace kvasir::chat {
namespace {

const std::string kBytes = std::to_string(kDefaultMaxOutputBytes);
const std::string kItems = std::to_string(kDefaultMaxSteps);

#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
constexpr double kQuick = 5.0;  // seconds; the default work budget is about one second
#else
constexpr double kQuick = 120.0;  // unoptimized and sanitized builds are many times slower
#endif

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kSmallStack = size_t{4} << 20;  // ASan frames are several times larger
#else
constexpr size_t kSmallStack = size_t{256} << 10;
#endif

std::string render(const std::string& src, const RenderOptions& opts = {}) {
  return ChatTemplate::parse(src).render(Json::object(), opts);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Runs f on a thread with a small stack (server workers are not the 8 MiB main thread).
void on_small_stack(const std::function<void()>& f) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kSmallStack);
  pthread_t th;
  auto run = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&th, &attr, run, const_cast<std::function<void()>*>(&f)), 0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
}

struct Outcome {
  bool threw = false;
  ErrorKind kind = ErrorKind::Runtime;
  std::string message, output;
  double seconds = 0;
};

Outcome attempt(const std::string& src, const RenderOptions& opts = {}) {
  Outcome o;
  auto start = std::chrono::steady_clock::now();
  try {
    o.output = render(src, opts);
  } catch (const TemplateError& e) {
    o.threw = true;
    o.kind = e.kind();
    o.message = e.message();
  } catch (const std::exception& e) {  // anything but a TemplateError is a failure
    o.message = std::string("foreign exception: ") + e.what();
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return o;
}

// The template fails quickly with a Limit error whose message contains `expected`.
void expect_limit(const std::string& src, const std::string& expected,
                  const RenderOptions& opts = {}) {
  Outcome o = attempt(src, opts);
  EXPECT_TRUE(o.threw) << src << "\n  -> " << o.message << o.output.substr(0, 200);
  EXPECT_EQ(o.kind, ErrorKind::Limit) << src << "\n  -> " << o.message;
  EXPECT_NE(o.message.find(expected), std::string::npos) << src << "\n  -> " << o.message;
  EXPECT_LT(o.seconds, kQuick) << src;
}

// ---- item 1: amplification is refused before it allocates ----

TEST(ChatTemplateAmplification, PrintfWidthAndPrecision) {
  expect_limit("{{ '%.999999999f' % 1.5 }}",
               "format precision 999999999 exceeds the limit of " + kBytes);
  expect_limit("{{ '%999999999d' % 1 }}", "format width 999999999 exceeds the limit of " + kBytes);
  expect_limit("{{ '%2147483648s' % 'a' }}", "format width 2147483648 exceeds the limit");
  expect_limit("{{ '%99999999999999999999d' % 1 }}", "format width");  // no int overflow
  expect_limit("{{ '%*d' % (2147483647, 1) }}", "format width 2147483647 exceeds the limit");
  expect_limit("{{ '%*d' % (-2147483647, 1) }}", "format width 2147483647 exceeds the limit");
  expect_limit("{{ '%.*f' % (2147483647, 1.0) }}", "format precision 2147483647 exceeds the limit");
  expect_limit("{{ '%-999999999s|' % 'a' }}", "format width 999999999");
  expect_limit("{{ '%.999999999e' % 1.5 }}", "format precision 999999999");
  expect_limit("{{ '%#.999999999g' % 1.5 }}", "format precision 999999999");
  expect_limit("{{ '%(a)999999999s' % {'a': 1} }}", "format width 999999999");
  expect_limit("{{ '%999999999s'|format('a') }}", "format width 999999999");
  expect_limit("{{ ('%999999999s'|safe) % 'a' }}", "format width 999999999");
  // Many fields, each within the limit, whose sum is not.
  expect_limit("{{ '" + repeat("%10000000s", 4) + "' % ('a', 'b', 'c', 'd') }}",
               "formatted string size");
  // The limit is the render's output limit.
  RenderOptions small;
  small.max_output_bytes = 1000;
  expect_limit("{{ '%2000d' % 1 }}", "format width 2000 exceeds the limit of 1000", small);
  EXPECT_EQ(render("{{ ('%999d' % 1)|length }}", small), "999");
}

TEST(ChatTemplateAmplification, StrFormatWidthAndPrecision) {
  expect_limit("{{ '{:>2147483647}'.format(1) }}",
               "format width 2147483647 exceeds the limit of " + kBytes);
  expect_limit("{{ '{:99999999999}'.format('a') }}", "format width 99999999999");
  expect_limit("{{ '{:.999999999f}'.format(1.5) }}", "format precision 999999999");
  expect_limit("{{ '{:.999999999}'.format(1.5) }}", "format precision 999999999");
  expect_limit("{{ '{:.999999999}'.format('abc') }}", "format precision 999999999");
  expect_limit("{{ '{:,>999999999,d}'.format(1) }}", "format width 999999999");
  expect_limit("{{ '{:=999999999}'.format(-1) }}", "format width 999999999");
  expect_limit("{{ '{:99999999999999999999}'.format(1) }}", "format width");
  // Nested fields in the spec, as Python expands them.
  expect_limit("{{ '{:{}}'.format(1, 2147483647) }}", "format width 2147483647");
  expect_limit("{{ '{:{}.{}f}'.format(1.5, 1, 2147483647) }}", "format precision 2147483647");
  expect_limit("{{ '{0:{w}}'.format(1, w=999999999) }}", "format width 999999999");
  expect_limit("{{ ('{:>999999999}'|safe).format(1) }}", "format width 999999999");
  expect_limit("{{ '" + repeat("{:>10000000}", 4) + "'.format(1, 2, 3, 4) }}",
               "formatted string size");
}

// Large precisions within the limit are exact and cheap: a double has at most 1074 decimals and
// 767 significant digits, so the digits beyond are zeros, which are appended rather than
// computed by printf (which takes seconds for 10^8 of them).
TEST(ChatTemplateAmplification, LargePrecisionsStayExact) {
  auto c_printf = [](const char* spec, double d) {
    int n = std::snprintf(nullptr, 0, spec, d);
    std::string s(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(s.data(), s.size(), spec, d);
    s.resize(n);
    return s;
  };
  struct Case {
    const char* jinja;  // the format string, in Jinja and printf
    double value;
    const char* value_src;
  };
  for (const Case& c : std::vector<Case>{{"%.1500f", 1.0 / 3, "1 / 3"},
                                         {"%.1500f", 5e-324, "5e-324"},
                                         {"%.1500e", 1.0 / 3, "1 / 3"},
                                         {"%.1500E", -1e300, "-1e300"},
                                         {"%.1500g", 1.0 / 3, "1 / 3"},
                                         {"%#.1500g", 1.0 / 3, "1 / 3"},
                                         {"%#.1500g", 1e-20, "1e-20"},
                                         {"%2000.1200f", 2.5, "2.5"},
                                         {"%-2000.1200e", 2.5, "2.5"},
                                         {"%+02000.1500f", 2.5, "2.5"},
                                         {"% 02000.1500f", -2.5, "-2.5"},
                                         {"%05000.1200f", 1e308 * 10, "1e308 * 10"}}) {
    std::string src = std::string("{{ '") + c.jinja + "' % (" + c.value_src + ") }}";
    EXPECT_EQ(render(src), c_printf(c.jinja, c.value)) << src;
  }
  auto start = std::chrono::steady_clock::now();
  std::string s = render("{{ '%.16000000f' % 1.5 }}");
  EXPECT_EQ(s.size(), 16000002u);
  EXPECT_EQ(s.substr(0, 5), "1.500");
  EXPECT_EQ(s.find_first_not_of('0', 3), std::string::npos);
  s = render("{{ '{:.8000000e}'.format(1.5) }}");
  EXPECT_EQ(s.size(), 8000006u);
  EXPECT_EQ(s.substr(s.size() - 4), "e+00");
  EXPECT_EQ(render("{{ '%.16000000g' % 1.5 }}"), "1.5");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            kQuick);
}

TEST(ChatTemplateAmplification, FormatStillFollowsPython) {
  // Expected strings are CPython's.
  EXPECT_EQ(render("{{ '{:{}}'.format(1, 5) }}"), "    1");
  EXPECT_EQ(render("{{ '{:{}.{}f}'.format(1.5, 8, 3) }}"), "   1.500");
  EXPECT_EQ(render("{{ '{0:{1}}|{2}'.format(1, 5, 7) }}"), "    1|7");
  EXPECT_EQ(render("{{ '{:{}}{}'.format(1, 3, 9) }}"), "  19");
  EXPECT_EQ(render("{{ '{:{x}}'.format(1, x=4) }}"), "   1");
  EXPECT_EQ(render("{{ '{:{}}'.format(1, '>4') }}"), "   1");
  EXPECT_EQ(render("{{ '%*d|' % (-5, 1) }}"), "1    |");
  EXPECT_EQ(render("{{ '%.*f' % (-1, 1.5) }}"), "2");
  EXPECT_EQ(render("{{ ('%999d' % 1)|length }}"), "999");  // was cut to 511 characters
  EXPECT_EQ(render("{{ ('%.600d' % 7)|length }}"), "600");
  Outcome o = attempt("{{ '{:{:{}}}'.format(1, 2, 3) }}");
  EXPECT_EQ(o.kind, ErrorKind::Value);
  EXPECT_EQ(o.message, "Max string recursion exceeded");
  o = attempt("{{ '{99999999999999999999}'.format(1) }}");
  EXPECT_EQ(o.kind, ErrorKind::Value) << o.message;
  EXPECT_EQ(o.message, "Too many decimal digits in format string");
  o = attempt("{{ '%*d' % ('a', 1) }}");
  EXPECT_EQ(o.kind, ErrorKind::Type) << o.message;
  EXPECT_EQ(o.message, "* wants int");
  o = attempt("{{ '%c' % 1114112 }}");
  EXPECT_EQ(o.kind, ErrorKind::Overflow) << o.message;
  EXPECT_EQ(o.message, "%c arg not in range(0x110000)");
  o = attempt("{{ [1]|map(attribute='99999999999999999999')|list }}");
  EXPECT_FALSE(o.threw) << o.message;
  EXPECT_EQ(o.output, "[Undefined]");
}

TEST(ChatTemplateAmplification, RepetitionPaddingAndFill) {
  expect_limit("{{ 'a' * 10**9 }}",
               "string repetition size 1000000000 exceeds the limit of " + kBytes);
  expect_limit("{{ 'ab' * 9223372036854775807 }}", "string repetition size");
  expect_limit("{{ [0] * 10**9 }}",
               "list repetition length 1000000000 exceeds the limit of " + kItems);
  expect_limit("{{ (1, 2) * 10**18 }}", "list repetition length");
  expect_limit("{{ 'a'|center(2147483647) }}", "center width 2147483647 exceeds the limit");
  expect_limit("{{ 'a'.center(2147483647) }}", "str.center width 2147483647");
  expect_limit("{{ 'a'.ljust(2147483647, '*') }}", "str.ljust width 2147483647");
  expect_limit("{{ 'a'.rjust(2147483647) }}", "str.rjust width 2147483647");
  expect_limit("{{ 'a'.zfill(2147483647) }}", "str.zfill width 2147483647");
  expect_limit("{{ '\\t\\t'.expandtabs(2147483647) }}", "str.expandtabs result size");
  expect_limit("{{ ('\\t' * 100)|string|attr('expandtabs')(1000000) }}",
               "str.expandtabs result size");
  expect_limit("{{ 'a\\nb'|indent(2147483647) }}", "indent width 2147483647");
  expect_limit("{{ [1]|batch(10**9, 0)|list|length }}",
               "batch size 1000000000 exceeds the limit of " + kItems);
  expect_limit("{{ [1]|slice(10**9)|list|length }}", "slice count 1000000000");
  expect_limit("{{ ('a' * 1000000)|replace('a', 'b' * 1000) }}",
               "str.replace result size 1000000000 exceeds the limit of " + kBytes);
  expect_limit("{{ ('a' * 1000000).replace('', 'b' * 100) }}", "str.replace result size");
  expect_limit("{{ (('a' * 1000000)|safe).replace('a', 'bb' * 100) }}", "str.replace result size");
  RenderOptions small;
  small.max_output_bytes = 1000;
  expect_limit("{{ strftime_now('%Y' * 400) }}", "strftime_now result size", small);
  // Within the limits these still work as in Python.
  EXPECT_EQ(render("{{ 'ab' * 3 }}|{{ [1] * 3 }}|{{ 'a'.center(5, '*') }}|{{ 'x'|center(5) }}"),
            "ababab|[1, 1, 1]|**a**|  x  ");
  EXPECT_EQ(
      render("{{ '\\ta'.expandtabs(4) }}|{{ '7'.zfill(3) }}|{{ [1, 2, 3]|batch(2, 0)|list }}"),
      "    a|007|[[1, 2], [3, 0]]");
  EXPECT_EQ(render("{{ 'aXbXc'.replace('X', '--') }}|{{ 'ab'.replace('', '.') }}"),
            "a--b--c|.a.b.");
  // Sandbox limits Jinja2 itself has keep Jinja2's errors.
  EXPECT_EQ(attempt("{{ range(10**9)|length }}").kind, ErrorKind::Overflow);
  EXPECT_EQ(attempt("{{ 2 ** 10**18 }}").kind, ErrorKind::Overflow);
}

// Lists and dicts share storage, so a value can be tiny to build and huge to print, serialize,
// hash or compare: each of those checks its output size and charges its work as it goes.
TEST(ChatTemplateAmplification, SharedStructureCannotBlowUp) {
  const std::string big =
      "{% set a = ['x' * 1000] * 1000 %}{% set b = [a] * 1000 %}{% set c = [b] * 1000 %}";
  expect_limit(big + "{{ c }}", "output larger than " + kBytes);
  expect_limit(big + "{{ c|tojson }}", "larger than " + kBytes);
  expect_limit(big + "{{ c|tojson(indent=1000) }}", "larger than " + kBytes);
  expect_limit(big + "{{ (c|string)|length }}", "larger than " + kBytes);
  expect_limit(big + "{{ ('%s' % (c,))|length }}", "larger than " + kBytes);
  expect_limit(big + "{{ ('{}'.format(c))|length }}", "larger than " + kBytes);
  expect_limit(big + "{{ c|join|length }}", "larger than " + kBytes);
  expect_limit("{% set t = (('x' * 1000,) * 1000,) * 1000 %}{% set t = (t,) * 1000 %}{{ t in {} }}",
               "larger than " + kBytes);
  expect_limit("{% set t = (('x' * 1000,) * 1000,) * 1000 %}{{ [t, t]|unique|list|length }}",
               "larger than " + kBytes);
  // Equal but distinct at every level: a billion comparisons.
  const std::string twins =
      "{% set a1 = ['x'] * 1000 %}{% set a2 = ['x'] * 1000 %}{% set b1 = [a1] * 1000 %}"
      "{% set b2 = [a2] * 1000 %}{% set c1 = [b1] * 1000 %}{% set c2 = [b2] * 1000 %}";
  expect_limit(twins + "{{ c1 == c2 }}", "steps");
  expect_limit(twins + "{{ c1 in [c2] }}", "steps");
  expect_limit(twins + "{{ [c1 + [0], c2 + [1]]|sort|length }}", "steps");
  expect_limit(twins + "{{ {'k': c1} == {'k': c2} }}", "steps");
  EXPECT_EQ(render(twins + "{{ c1 == c1 }}{{ c1|length }}"), "True1000");
}

// Operations linear in a long operand cost time in proportion: repeated in a loop they exhaust
// the work budget (within about a second) rather than running for minutes.
TEST(ChatTemplateAmplification, ScansOfLongValuesAreCharged) {
  const std::string str = "{% set x = 'a' * 10000000 %}{% for i in range(100000) %}";
  const std::string list = "{% set x = [0] * 4000000 %}{% for i in range(100000) %}";
  for (const std::string& body :
       {str + "{{ x[5] }}", str + "{{ x[-1:] }}", str + "{{ x|length }}", str + "{{ 'b' in x }}",
        str + "{{ x.count('b') }}", str + "{{ x.find('b', 10) }}", str + "{{ x|wordcount }}",
        str + "{{ x.isalpha() }}", str + "{{ x is lower }}", str + "{{ x == x ~ '' }}",
        str + "{{ {x: 1}|length }}", list + "{{ x|join }}", list + "{{ x|last }}",
        list + "{{ 1 in x }}", list + "{{ x.count(1) }}", list + "{{ x|sum }}",
        list + "{{ x|max }}", list + "{{ x|first }}", list + "{{ x is sameas (x|list) }}"}) {
    expect_limit(body + "{% endfor %}", "steps");
  }
  // Iterating a string makes a string per character: charged before they are made.
  expect_limit("{% set x = 'a' * 16000000 %}{{ x|list|length }}", "steps");
  // A realistic template is far from the budget.
  Json msgs = Json::array();
  for (int i = 0; i < 1000; ++i)
    msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(2000, 'x')}});
  EXPECT_NO_THROW(
      ChatTemplate::parse("{% for m in messages %}{% if m.role == 'user' %}<|user|>{% else %}"
                          "<|assistant|>{% endif %}{% if '</think>' in m.content %}"
                          "{{ m.content.split('</think>')[-1]|trim }}{% else %}{{ m.content|trim }}"
                          "{% endif %}{{ m.content|length }}\n{% endfor %}")
          .render({{"messages", msgs}}));
}

// Substring search stays linear: std::string::find takes O(n*m) on "aa...ab" in "aa...a".
TEST(ChatTemplateAmplification, SubstringSearchIsLinear) {
  const std::string setup = "{% set h = 'a' * 4000000 %}{% set n = 'a' * 200000 ~ 'b' %}";
  struct Case {
    const char* expr;
    const char* expected;
  };
  for (const Case& c : std::vector<Case>{{"n in h", "False"},
                                         {"h.find(n)", "-1"},
                                         {"h.rfind(n)", "-1"},
                                         {"h.count(n)", "0"},
                                         {"h.split(n)|length", "1"},
                                         {"h.rsplit(n)|length", "1"},
                                         {"h.partition(n)[0]|length", "4000000"},
                                         {"h.rpartition(n)[2]|length", "4000000"},
                                         {"h.replace(n, '')|length", "4000000"},
                                         {"(h ~ n ~ h).find(n)", "4000000"},
                                         {"(h ~ n ~ h).rfind(n)", "4000000"},
                                         {"(h ~ n ~ h ~ n).rsplit(n)|length", "3"},
                                         {"(h ~ n ~ h).index(n, 5)", "4000000"}}) {
    std::string src = setup + "{{ " + c.expr + " }}";
    Outcome o = attempt(src);
    EXPECT_FALSE(o.threw) << c.expr << ": " << o.message;
    EXPECT_EQ(o.output, c.expected) << c.expr;
    EXPECT_LT(o.seconds, kQuick) << c.expr;
  }
}

// ---- item 2: long chains are refused at parse time, on a small stack ----

TEST(ChatTemplateChains, LongChainsAreSyntaxErrors) {
  constexpr int kLinks = 100000;  // far beyond kMaxExprDepth; tens of MB of stack if recursed
  std::vector<std::string> sources = {
      "{{ x" + repeat("|string", kLinks) + " }}",
      "{{ 1" + repeat("+1", kLinks) + " }}",
      "{{ 1" + repeat("-1", kLinks) + " }}",
      "{{ 1" + repeat("*1", kLinks) + " }}",
      "{{ 2" + repeat("**2", kLinks) + " }}",
      "{{ x" + repeat(" or x", kLinks) + " }}",
      "{{ x" + repeat(" and x", kLinks) + " }}",
      "{{ x" + repeat(".a", kLinks) + " }}",
      "{{ x" + repeat("[0]", kLinks) + " }}",
      "{{ f" + repeat("()", kLinks) + " }}",
      "{{ x" + repeat("|string()", kLinks) + " }}",
      "{{ 1" + repeat(" if x", kLinks) + " }}",
      "{{ x" + repeat(" is defined", 1) + repeat("|string", kLinks) + " }}",
      "{% filter upper" + repeat("|upper", kLinks) + " %}a{% endfilter %}",
      "{% set y | upper" + repeat("|upper", kLinks) + " %}a{% endset %}",
      "{% if x" + repeat(" or x", kLinks) + " %}{% endif %}",
      "{% for i in x" + repeat("|list", kLinks) + " %}{% endfor %}",
      // Chains inside brackets inside chains: heights add up across the brackets.
      "{{ " + repeat("(", 50) + "x" + repeat("|string", 150) + repeat(")|string", 50) + " }}",
      "{{ [" + repeat("x+", 150) + "x]" + repeat("|string", 60) + " }}",
      "{{ {'k': " + repeat("x~", 10) + "x" + repeat("|string", 150) + "}" + repeat(".k", 60) +
          " }}",
  };
  for (const std::string& src : sources) {
    Outcome o;
    on_small_stack([&] {
      try {
        ChatTemplate::parse(src);
      } catch (const TemplateError& e) {
        o.threw = true;
        o.kind = e.kind();
        o.message = e.message();
      }
    });
    EXPECT_TRUE(o.threw) << src.substr(0, 80);
    EXPECT_EQ(o.kind, ErrorKind::Syntax) << src.substr(0, 80);
    EXPECT_NE(o.message.find("nested too deeply (more than " + std::to_string(kMaxExprDepth)),
              std::string::npos)
        << src.substr(0, 80) << ": " << o.message;
  }
  // Parenthesized assignment targets nest by recursion: the nesting limit applies.
  Outcome o;
  const std::string target =
      "{% for " + repeat("(", kLinks) + "x" + repeat(")", kLinks) + " in [1] %}{% endfor %}";
  on_small_stack([&] {
    try {
      ChatTemplate::parse(target);
    } catch (const TemplateError& e) {
      o.threw = true;
      o.kind = e.kind();
      o.message = e.message();
    }
  });
  EXPECT_TRUE(o.threw);
  EXPECT_EQ(o.kind, ErrorKind::Syntax);
  EXPECT_NE(o.message.find("nesting is too deep"), std::string::npos) << o.message;
}

// Chains up to the limit parse and render, even nested deep in blocks and macro recursion, on a
// small stack; recursion past the render's depth limit ends in a Limit error, not a crash.
TEST(ChatTemplateChains, ChainsWithinTheLimitRenderOnASmallStack) {
  const int n = kMaxExprDepth - 1;
  struct Case {
    std::string src, expected;
    ErrorKind kind = ErrorKind::Runtime;  // Runtime: no error expected
  };
  std::vector<Case> cases = {
      {"{{ 1" + repeat("+1", n - 1) + " }}", std::to_string(n)},
      {"{{ 'a'" + repeat("|upper|lower", n / 2 - 1) + " }}", "a"},
      {"{{ x" + repeat(" or x", n - 1) + " }}|", "|"},
      {repeat("{% if true %}", 150) + "{{ 'a'" + repeat("|string", n - 1) + " }}" +
           repeat("{% endif %}", 150),
       "a"},
      {"{% macro m(k) %}{% if k > 0 %}{{ m(k - 1) }}{% endif %}{{ 0" + repeat("+1", n - 1) +
           " }}{% endmacro %}{{ m(2) }}",
       repeat(std::to_string(n - 1), 3)},
      {"{% macro m(k) %}{{ 0" + repeat("+1", n - 2) + "+m(k + 1) }}{% endmacro %}{{ m(0) }}", "",
       ErrorKind::Limit},
      {"{% macro m(k) %}{% filter upper" + repeat("|lower|upper", 90) +
           " %}{{ m(k + 1) }}{% endfilter %}{% endmacro %}{{ m(0) }}",
       "", ErrorKind::Limit},
  };
  for (const Case& c : cases) {
    Outcome o;
    on_small_stack([&] { o = attempt(c.src); });
    if (c.kind == ErrorKind::Runtime) {
      EXPECT_FALSE(o.threw) << c.src.substr(0, 80) << ": " << o.message;
      EXPECT_EQ(o.output, c.expected) << c.src.substr(0, 80);
    } else {
      EXPECT_TRUE(o.threw) << c.src.substr(0, 80);
      EXPECT_EQ(o.kind, c.kind) << c.src.substr(0, 80) << ": " << o.message;
    }
  }
}

}  // namespace
}  // namespace kvasir::chat
