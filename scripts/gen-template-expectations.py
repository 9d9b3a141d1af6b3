#!/usr/bin/env python3
"""Writes the expected renderings that tests/chat checks Kvasir's template engine against.

The reference is Python's Jinja2 configured exactly as Hugging Face transformers configures it
for chat templates (transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and the {% generation %} tag, the `tojson` filter replaced by json.dumps
(ensure_ascii=False, indent, separators, sort_keys), and the globals raise_exception(msg) and
strftime_now(fmt). apply_chat_template passes messages, tools (None when absent), documents
(None when absent), add_generation_prompt, the special tokens and any extra keyword arguments.
strftime_now uses the fixed time NOW (UTC) so the output is reproducible; the C++ tests render
with the same time.

Outputs (JSON, UTF-8):
  tests/chat/data/templates/<template stem>.json  every template in ../shared/templates rendered
      for a set of conversations; each case holds its inputs and either "expected" (the prompt)
      or "error" ({"type": Python exception name, "message": str(exception)}).
  tests/chat/data/features.json  small templates exercising the language (whitespace control,
      scoping, filters, tests, Python value formatting, error messages), each with its context
      and expected output or error.

Usage: python3 scripts/gen-template-expectations.py   (needs Jinja2 >= 3.1)
"""

import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATES = ROOT.parent / "shared" / "templates"
OUT = ROOT / "tests" / "chat" / "data"

NOW = 1721986200  # 2024-07-26 09:30:00 UTC
BOS = "<s>"
EOS = "</s>"


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} as transformers defines it (renders its body)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW, tz=datetime.timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def run(env, source, context):
    """Renders; returns ("expected", text) or ("error", {"type", "message"})."""
    try:
        return "expected", env.from_string(source).render(**context)
    except jinja2.exceptions.TemplateSyntaxError as e:  # includes TemplateAssertionError
        return "error", {"type": "TemplateSyntaxError", "message": e.message or str(e)}
    except RecursionError:
        return "error", {"type": "LimitExceeded", "message": "recursion"}
    except Exception as e:  # noqa: BLE001 - the exception is the expectation
        return "error", {"type": type(e).__name__, "message": str(e)}


# ---- conversations rendered with every template ----

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "  Temperature unit  "},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documentation — returns snippets (ünïcode ok).",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "max_results": {"type": "integer", "description": "At most this many"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter by tags"},
                "options": {"type": "object", "additionalProperties": {"type": "number"},
                            "description": "Tuning knobs"},
                "mode": {"type": ["string", "integer"], "description": "Search mode or mode id"},
                "score": {"type": "number", "description": "Minimum score, e.g. 0.5"},
            },
            "required": ["query"],
        },
        "return": {"type": "array", "items": {"type": "string"}, "description": "The snippets."},
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]
# A nullable union type: the Hermes template recurses forever on it (its macro iterates the
# characters of "null"); Jinja2 stops with RecursionError, Kvasir with its depth limit.
NULLABLE_TOOL = {
    "type": "function",
    "function": {
        "name": "set_mode",
        "description": "Set or clear the mode.",
        "parameters": {"type": "object",
                       "properties": {"mode": {"type": ["string", "null"], "description": "Mode"}}},
    },
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER_1 = {"role": "user", "content": "Hello! How are you?"}
ASSISTANT_1 = {"role": "assistant", "content": "I'm fine, thank you. How can I help?"}
USER_2 = {"role": "user", "content": "What is 2 + 2?"}
ASSISTANT_THINK = {"role": "assistant",
                   "content": "<think>\nThe user asks 2 + 2. That is 4.\n</think>\n\nThe answer is 4."}


def tool_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CALL_DICT = tool_call("call12345", "get_weather", {"location": "Paris, France", "unit": "celsius"})
CALL_STR = tool_call("call12345", "get_weather", '{"location": "Paris, France", "unit": "celsius"}')
CALL_2 = tool_call("call67890", "search_docs", {"query": "rain gear", "max_results": 3, "score": 0.5})
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": '{"temperature": 22, "condition": "sunny"}'}
TOOL_RESULT_2 = {"role": "tool", "tool_call_id": "call67890", "name": "search_docs",
                 "content": "1. Umbrella\n2. Raincoat"}
FINAL = {"role": "assistant", "content": "It is 22 °C and sunny in Paris."}

CASES = [
    # name, messages, add_generation_prompt, tools, extra
    ("system_user", [SYSTEM, USER_1], True, None, {}),
    ("system_user_no_prompt", [SYSTEM, USER_1], False, None, {}),
    ("user_only", [USER_2], True, None, {}),
    ("multi_turn", [USER_1, ASSISTANT_1, USER_2], True, None, {}),
    ("multi_turn_system", [SYSTEM, USER_1, ASSISTANT_1, USER_2], True, None, {}),
    ("ends_with_assistant", [SYSTEM, USER_1, ASSISTANT_1], False, None, {}),
    ("thinking_history", [USER_2, ASSISTANT_THINK, {"role": "user", "content": "And 3 + 3?"}], True,
     None, {}),
    ("thinking_last", [USER_2, ASSISTANT_THINK], False, None, {}),
    ("unicode_and_escapes",
     [{"role": "system", "content": "Réponds en français. 你好 🙂 \"quotes\" 'single' \\backslash"},
      {"role": "user", "content": "  line one\n\tline two with tab\r\nline three  \n"}], True, None, {}),
    ("empty_system", [{"role": "system", "content": ""}, USER_1], True, None, {}),
    ("tools_user", [USER_2], True, TOOLS, {}),
    ("tools_system_user", [SYSTEM, USER_2], True, TOOLS, {}),
    ("tools_nullable_type", [USER_2], True, [NULLABLE_TOOL], {}),
    ("tool_call_roundtrip",
     [SYSTEM, {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": None, "tool_calls": [CALL_DICT]}, TOOL_RESULT, FINAL], True,
     [WEATHER_TOOL], {}),
    ("tool_call_string_arguments",
     [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": None, "tool_calls": [CALL_STR]}, TOOL_RESULT], True,
     [WEATHER_TOOL], {}),
    ("tool_call_empty_content",
     [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [CALL_DICT]}, TOOL_RESULT, FINAL], False,
     [WEATHER_TOOL], {}),
    ("tool_call_with_text",
     [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL_DICT]}, TOOL_RESULT],
     True, [WEATHER_TOOL], {}),
    ("two_tool_calls",
     [{"role": "user", "content": "Weather in Paris, and rain gear?"},
      {"role": "assistant", "content": None, "tool_calls": [CALL_DICT, CALL_2]}, TOOL_RESULT,
      TOOL_RESULT_2], True, TOOLS, {}),
    ("tool_result_mapping",
     [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": None, "tool_calls": [CALL_DICT]},
      {"role": "tool", "tool_call_id": "call12345", "content": {"temperature": 22, "ok": True}}],
     True, [WEATHER_TOOL], {}),
    ("content_blocks",
     [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
      {"role": "user", "content": [{"type": "text", "text": "Describe this image."},
                                   {"type": "image"}]}], True, None, {}),
    ("roles_not_alternating", [USER_1, USER_2], True, None, {}),
    ("enable_thinking_false", [USER_2], True, None, {"enable_thinking": False}),
    ("enable_thinking_true", [USER_2], True, None, {"enable_thinking": True}),
    ("keep_past_thinking", [USER_2, ASSISTANT_THINK, {"role": "user", "content": "More?"}], True,
     None, {"keep_past_thinking": True}),
    ("date_string", [SYSTEM, USER_2], True, None, {"date_string": "01 Jan 2025"}),
    ("tools_not_in_user_message", [SYSTEM, USER_2], True, [WEATHER_TOOL],
     {"tools_in_user_message": False}),
    ("builtin_tools",
     [{"role": "user", "content": "Search for the weather"},
      {"role": "assistant", "content": None,
       "tool_calls": [tool_call("call00001", "brave_search", {"query": "weather Paris"})]},
      {"role": "ipython", "content": "Sunny, 22 degrees"}], True, None,
     {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}),
    ("documents",
     [USER_2], True, None,
     {"documents": [{"doc_id": 1, "title": "Arithmetic", "text": "2 + 2 = 4"},
                    {"doc_id": 2, "title": "More", "text": "3 + 3 = 6"}]}),
    ("available_tools", [USER_2], True, None, {"available_tools": [WEATHER_TOOL]}),
]


def render_templates(env):
    count = 0
    out_dir = OUT / "templates"
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(TEMPLATES.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        cases = []
        for name, messages, agp, tools, extra in CASES:
            context = {"messages": messages, "tools": tools, "documents": None,
                       "add_generation_prompt": agp, "bos_token": BOS, "eos_token": EOS}
            context.update(extra)
            kind, result = run(env, source, context)
            case = {"name": name, "messages": messages, "add_generation_prompt": agp,
                    "bos_token": BOS, "eos_token": EOS, "tools": tools, "extra": extra,
                    kind: result}
            cases.append(case)
            count += 1
        doc = {"template": path.name, "generator": "scripts/gen-template-expectations.py",
               "jinja2_version": jinja2.__version__, "now": NOW, "cases": cases}
        (out_dir / (path.stem + ".json")).write_text(
            json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return count


# ---- language feature corpus ----

CTX = {
    "xs": [1, 2, 3],
    "words": ["banana", "Apple", "cherry", "apple"],
    "d": {"b": 1, "a": [1, 2], "c": None},
    "s": "héllo Wörld",
    "n": None,
    "t": True,
    "f": 1.5,
    "users": [{"name": "Ann", "age": 31, "admin": True},
              {"name": "bob", "age": 25},
              {"name": "Cid", "age": 31, "admin": False}],
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo"}],
    "nested": {"a": {"b": {"c": "deep"}}},
}

# (name, template, context or None for CTX)
FEATURES = [
    # whitespace control, trim_blocks / lstrip_blocks, comments, raw
    ("ws_trim_lstrip", "a\n  {% if true %}\n    x\n  {% endif %}\nb\n", None),
    ("ws_minus", "a  {{- 'x' -}}  b\n  {%- if true -%}  c  {%- endif -%}  d", None),
    ("ws_plus_disables_lstrip", "a\n  {%+ if true %}x{% endif %}\n", None),
    ("ws_plus_disables_trim", "{% if true +%}\nx{% endif %}", None),
    ("ws_var_not_lstripped", "  {{ 'v' }}\n  {% if true %}y{% endif %}", None),
    ("ws_inline_block_not_lstripped", "a {% if true %}b{% endif %} c", None),
    ("ws_comment", "a\n  {# comment #}\nb {#- c -#} c\n{#+ keep +#}\nd", None),
    ("ws_raw", "{% raw %}{{ not_parsed }} {% if %}{% endraw %}|\n  {%- raw -%}  x  {%- endraw %}", None),
    ("ws_trailing_newline_dropped", "line\n", None),
    ("ws_crlf_normalized", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", None),
    ("ws_unicode_space_strip", "a\u3000 {{- 'b' -}} \u00a0c", None),
    ("ws_lstrip_at_template_start", "   {% if true %}x{% endif %}", None),
    ("ws_lstrip_tabs_and_spaces", "a\n\t  {% if true %}\n\tb\n \t{% endif %}\nc", None),
    ("ws_no_lstrip_after_text_on_line", "a  {% if true %}b{% endif %}\n{{ 'v' }}  {% if true %}c{% endif %}", None),
    ("ws_lstrip_after_var_newline", "{{ 'v' }}\n    {% if true %}c{% endif %}", None),
    ("ws_lstrip_comment_line", "a\n    {# note #}\nb\n  {#- x #}  c", None),
    ("ws_lstrip_raw", "x\n  {% raw %}  {{ y }}\n  {% endraw %}\nz", None),
    ("ws_trim_only_one_newline", "{% if true %}\n\nx{% endif %}\n\ny", None),
    ("ws_minus_on_var_removes_newlines", "a\n\n  {{- 'b' }}\n\n  {{ 'c' -}}\n\n d", None),
    ("ws_block_end_minus_then_lstrip", "{% if true -%}\n   {% if true %}\n  x\n  {% endif %}\n{% endif %}", None),
    ("ws_nested_loops_indent", "{% for a in [1, 2] %}\n  {% for b in 'xy' %}\n    {{ a }}{{ b }}\n  {% endfor %}\n{% endfor %}\n", None),
    ("ws_braces_in_strings_and_dicts", "{{ {'a': {'b': '}}'}} }}|{% set x = '%}' %}{{ x }}|a { b } {x}", None),
    ("ws_multiline_tag", "{%\n  set x = 1\n%}{{\n x\n}}", None),
    # literals and printing
    ("print_values", "{{ xs }}|{{ d }}|{{ n }}|{{ t }}|{{ f }}|{{ (1, 'a') }}|{{ (1,) }}|{{ () }}|{{ [] }}|{{ {} }}", None),
    ("print_floats", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 1e15 }} {{ 123456789.125 }} {{ -0.0 }} {{ 2.5e-3 }} {{ 1_000.5 }} {{ 10 / 4 }} {{ 4 / 2 }}", None),
    ("print_ints", "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000_000 }} {{ -7 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}", None),
    ("print_string_repr", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', 'back\\\\slash', 'é', '\\x01', '\\u00a0'] }}", None),
    ("print_nested_repr", "{{ {'k': [1, {'x': none, 'y': true}], 2: (3.5, 'z')} }}", None),
    ("string_escapes", "{{ 'a\\tb\\nc\\x41\\u00e9\\U0001F600\\101\\q' }}", None),
    ("string_adjacent_concat", "{{ 'a' 'b' \"c\" }}", None),
    ("dict_duplicate_keys", "{{ {'a': 1, 'b': 2, 'a': 3} }}", None),
    ("dict_numeric_keys", "{{ {1: 'a', 1.0: 'b', true: 'c'} }}", None),
    # operators
    ("arith_mixed", "{{ 1 + 2.5 }} {{ true + 1 }} {{ 3 * true }} {{ -true }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [1] * 3 }} {{ [1, 2] + [3] }} {{ (1,) + (2,) }} {{ 'a' ~ 1 ~ none ~ true }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", None),
    ("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ (1, 2) == [1, 2] }} {{ none == none }}", None),
    ("in_operator", "{{ 'ell' in 'hello' }} {{ 2 in xs }} {{ 'a' in d }} {{ 'z' not in d }} {{ 4 not in xs }} {{ 1 in undefined_thing }}", None),
    ("logic_values", "{{ 0 or 'x' }} {{ '' and 'y' }} {{ 'a' and 'b' }} {{ none or none }}|{{ not xs }} {{ not [] }}", None),
    ("cond_expr", "{{ 'yes' if xs else 'no' }} {{ 'yes' if [] else 'no' }} {{ 'a' if false }}|{{ 1 if false else 2 if false else 3 }}", None),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 1 ~ 2 * 3 }} {{ 'x' ~ (1 + 2) }} {{ -xs|length }} {{ 2 * 3 ~ 4 }}", None),
    # attribute and item access, slices
    ("getattr_getitem", "{{ d.b }} {{ d['a'][1] }} {{ xs[-1] }} {{ xs.1 }} {{ nested.a.b.c }} {{ nested['a']['b'].c }} {{ msgs[1].role }}", None),
    ("missing_is_undefined", "[{{ d.zz }}][{{ xs[10] }}][{{ d.a.zz }}][{{ s.zz }}][{{ n.zz }}]", None),
    ("dict_method_vs_key", "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('b') }} {{ d.get('zz', 'dflt') }} {{ d['get'] is defined }}", None),
    ("slices", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ s[1:4] }} {{ s[::-1] }} {{ xs[5:] }} {{ s[-3:] }} {{ xs[-100:100] }} {{ (1, 2, 3)[1:] }}", None),
    ("string_index_unicode", "{{ s[1] }} {{ s|length }} {{ s[-1] }} {{ '🙂x'[0] }} {{ '🙂x'|length }}", None),
    # statements
    ("for_loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }};{% endfor %}", None),
    ("for_prev_next", "{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}", None),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in xs if x > 5 %}x{% else %}none>5{% endfor %}", None),
    ("for_filter", "{% for x in xs if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", None),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }}{% endfor %}", None),
    ("for_dict_and_string", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héy' %}{{ c }}.{% endfor %}|{% for x in undefined_thing %}x{% endfor %}", None),
    ("for_cycle_changed", "{% for x in [1, 1, 2, 3, 3] %}{{ loop.cycle('a', 'b') }}{% if loop.changed(x) %}!{% endif %}{% endfor %}", None),
    ("for_nested_loop_var", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %}", None),
    ("for_break_continue", "{% for x in range(10) %}{% if x is even %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}", None),
    ("for_recursive", "{% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': [{'n': 'c', 'c': []}]}]}, {'n': 'd', 'c': []}] recursive %}{{ item.n }}{{ loop.depth }}{% if item.c %}({{ loop(item.c) }}){% endif %}{% endfor %}", None),
    ("scope_loop_set", "{% set c = 0 %}{% for i in [1, 2] %}{{ c }}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}", None),
    ("scope_loop_set_conditional", "{% set content = 'outer' %}{% for i in [1, 2] %}{% if i == 1 %}{% set content = 'in' %}{% endif %}{{ content }};{% endfor %}{{ content }}", None),
    ("scope_if_leaks", "{% if true %}{% set z = 3 %}{% endif %}{{ z }}", None),
    ("scope_loop_var_reassign", "{% for x in xs %}{% set x = x * 10 %}{{ x }} {% endfor %}{{ x }}", None),
    ("scope_set_messages_slice", "{% set msgs = msgs[1:] %}{% for m in msgs %}{{ m.role }} {% endfor %}", None),
    ("namespace", "{% set ns = namespace(total=0, names=[]) %}{% for u in users %}{% set ns.total = ns.total + u.age %}{% set ns.names = ns.names + [u.name] %}{% endfor %}{{ ns.total }} {{ ns.names }} {{ ns }}", None),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}{{ ns.zz is defined }}", None),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", None),
    ("set_block", "{% set block %}  Hello {{ 'World' }}!\n{% endset %}[{{ block }}]{% set up | upper | trim %} shout {% endset %}[{{ up }}]", None),
    ("with_block", "{% set x = 1 %}{% with x = 2, y = x %}{{ x }}{{ y }}{% endwith %}{{ x }}", None),
    ("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}|{% filter replace('a', 'o') | title %}banana bread{% endfilter %}", None),
    ("macro_defaults", "{% macro m(a, b=2, c='x' ~ a) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(b=4, a=0) }}|{{ m(5, c='z') }}", None),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}|{{ m() }}", None),
    ("macro_late_binding", "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}{% for i in [1] %}{% set x = 3 %}{{ m() }}{% endfor %}", None),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(10) }}", None),
    ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}", None),
    ("macro_caller_nested", "{% macro f(n) %}{% if n < 3 %}{% call(x) f(n + 1) %}<{{ n }}{{ x }}{{ caller(x) if caller is defined }}>{% endcall %}{% else %}{{ caller('end') }}{% endif %}{% endmacro %}{% call(x) f(0) %}top{{ x }}{% endcall %}", None),
    ("macro_caller_in_nested_macro", "{% macro outer() %}{% macro inner() %}{{ caller() }}{% endmacro %}{{ inner() }}{% endmacro %}{% call outer() %}X{% endcall %}", None),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}][{{ b is defined }}]{% endmacro %}{{ m(1) }}", None),
    ("macro_returns_string", "{% macro m() %}  x  {% endmacro %}[{{ m() }}][{{ m()|trim }}][{{ m() is string }}]", None),
    ("generation_tag", "A{% generation %}gen {{ 1 }}{% endgeneration %}B", None),
    ("print_statement", "{% print 'a', 1 %}", None),
    # tests
    ("tests_types", "{{ none is none }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} {{ 'a' is string }} {{ d is mapping }} {{ xs is sequence }} {{ d is sequence }} {{ 'a' is iterable }} {{ 5 is iterable }} {{ undefined_thing is iterable }} {{ undefined_thing is sequence }} {{ n is mapping }} {{ range is callable }} {{ xs is callable }}", None),
    ("tests_values", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 'a' is lower }} {{ 'A' is upper }} {{ 'aB' is lower }} {{ 2 is in xs }} {{ 2 is eq 2 }} {{ 2 is equalto 3 }} {{ 3 is gt 2 }} {{ 3 is ge 3 }} {{ 2 is lt 1 }} {{ 2 is le 2 }} {{ 2 is ne 2 }} {{ none is sameas none }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'zz' is filter }}", None),
    ("tests_defined", "{{ xs is defined }} {{ zz is defined }} {{ zz is undefined }} {{ d.zz is defined }} {{ n is defined }} {{ not zz is defined }} {{ zz is not defined }}", None),
    # filters
    ("filter_default", "{{ zz|default('x') }} {{ n|default('x') }} {{ ''|default('x', true) }} {{ false|d('y') }} {{ zz|d }}|{{ 0|default(5, boolean=true) }}", None),
    ("filter_strings", "{{ s|upper }} {{ s|lower }} {{ 'hello WORLD'|capitalize }} {{ \"it's a-b (c)[d] {e} <f>\"|title }} {{ '  x  '|trim }}| {{ 'xxaxx'|trim('x') }} {{ 'abcabc'|replace('b', 'X') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|center(6) }}| {{ 'abc'|center(6) }}|", None),
    ("filter_length_count", "{{ xs|length }} {{ d|count }} {{ s|length }} {{ zz|length }} {{ ''|length }}", None),
    ("filter_first_last", "{{ xs|first }} {{ xs|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ d|first }} {{ []|first }}|{{ []|last }}|{{ zz|first }}|", None),
    ("filter_join", "{{ xs|join(', ') }} {{ [1, none, 'a']|join }} {{ users|join('/', attribute='name') }} {{ 'abc'|join('-') }}", None),
    ("filter_list_string", "{{ 'abc'|list }} {{ d|list }} {{ xs|string }} {{ n|string }} {{ zz|string }}|{{ 1.0|string }}", None),
    ("filter_int_float", "{{ '3'|int }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(9) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ '0b11'|int(base=2) }} {{ ' 42 '|int }} {{ '1_000'|int }} {{ true|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ ' 1e3 '|float }} {{ 'inf'|float }} {{ none|int }}", None),
    ("filter_abs_round", "{{ -3|abs }} {{ (-3.5)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 7|round }} {{ 2.567|round(2, 'floor') }} {{ 2.561|round(2, 'ceil') }} {{ -1.5|round }} {{ 1234.5678|round(-2) }}", None),
    ("filter_map", "{{ words|map('upper')|list }} {{ users|map(attribute='name')|list }} {{ users|map(attribute='admin')|list }} {{ users|map(attribute='admin', default=false)|list }} {{ xs|map('string')|join }} {{ [' a ', 'b ']|map('trim')|list }}", None),
    ("filter_select_reject", "{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ [0, 1, '', none, 'a']|select|list }} {{ xs|select('gt', 1)|list }} {{ xs|select('in', [1, 3])|list }} {{ words|select('equalto', 'apple')|list }}", None),
    ("filter_selectattr", "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|list }} {{ users|selectattr('age', 'equalto', 31)|map(attribute='name')|join(',') }} {{ msgs|selectattr('role', '==', 'user')|list }} {{ users|selectattr('admin', 'defined')|list|length }}", None),
    ("filter_generator_semantics", "{% set g = xs|select('odd') %}{{ g|first }}|{{ g|list }}|{{ g|list }}|{% if xs|select('gt', 10) %}truthy{% endif %}", None),
    ("filter_sort", "{{ [3, 1, 2]|sort }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ words|sort(reverse=true) }} {{ users|sort(attribute='age')|map(attribute='name')|list }} {{ users|sort(attribute='age,name')|map(attribute='name')|list }} {{ users|sort(attribute='name')|map(attribute='name')|list }}", None),
    ("filter_dictsort", "{{ {'b': 1, 'A': 2, 'c': 0}|dictsort }} {{ {'b': 1, 'A': 2}|dictsort(true) }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}", None),
    ("filter_unique_min_max_sum", "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ xs|min }} {{ xs|max }} {{ words|min }} {{ words|max(case_sensitive=true) }} {{ users|max(attribute='age') }} {{ xs|sum }} {{ users|sum(attribute='age') }} {{ [0.5, 1]|sum(start=10) }} {{ []|max }}|", None),
    ("filter_batch_slice", "{{ range(7)|batch(3)|list }} {{ range(7)|batch(3, 'x')|list }} {{ range(7)|slice(3)|list }} {{ range(7)|slice(3, 0)|list }}", None),
    ("filter_reverse", "{{ xs|reverse|list }} {{ 'abc'|reverse }} {{ d|reverse|list }} {{ xs|select|reverse|list }}", None),
    ("filter_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(first=true, blank=true) }}|{{ 'a\\nb'|indent('> ') }}|{{ ''|indent }}|", None),
    ("filter_truncate_wordcount", "{{ 'hello world foo bar'|truncate(9) }}|{{ 'hello world foo bar'|truncate(9, true) }}|{{ 'hello'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(11, false, '...', 0) }}|{{ 'one two, three_four!'|wordcount }}", None),
    ("filter_items_attr", "{{ d|items|list }} {{ zz|items|list }} {% for k, v in {'x': 1}|items %}{{ k }}{{ v }}{% endfor %} {{ d|attr('b') }}|{{ 'abc'|attr('upper') is defined }}", None),
    ("filter_format", "{{ '%s-%d-%.2f-%5s-%-3s|-%x-%r'|format('a', 3, 1.005, 'r', 'l', 255, 'q') }} {{ '%(a)s %(b)s'|format(a=1, b='two') }} {{ '%s %%'|format(5) }}", None),
    ("filter_groupby", "{% for g in users|groupby('age') %}{{ g.grouper }}:{{ g.list|map(attribute='name')|join(',') }};{% endfor %}|{% for age, items in users|groupby('age') %}{{ age }}={{ items|length }} {% endfor %}", None),
    ("filter_escape_safe_striptags", "{{ '<a href=\"x\">T&C</a>'|e }} {{ 'x'|safe }} {{ 5|safe }} {{ '<p>Hello   <b>World</b></p>'|striptags }}", None),
    ("markup_concat_escapes", "{{ 'a&b'|safe + '<i>' }}|{{ '<i>' + 'a&b'|safe }}|{{ ('x'|safe + d|tojson) }}|{{ 'x'|e + 'y' }}|{{ ('<'|safe) * 3 }}|{{ 'a<b'|safe ~ '<c>' }}|{{ ('%s|%r'|safe) % ('<a>', 'b') }}", None),
    ("markup_filters_and_methods", "{{ ('<b>x</b>'|safe).upper() }}|{{ ('a b'|safe).split() }}|{{ ('<>'|safe).replace('<', '&') }}|{{ (','|safe).join(['<', 2]) }}|{{ ('{}&{}'|safe).format('<', 1) }}|{{ ' <x> '|safe|trim }}|{{ '<x>'|safe|upper is escaped }}|{{ 'x'|safe is escaped }}|{{ 'x' is escaped }}|{{ ['a'|safe, 'b'] }}|{{ ('ab'|safe)[0] is escaped }}", None),
    ("markup_forceescape_and_escape", "{{ '<a>'|e|e }}|{{ '<a>'|e|forceescape }}|{{ 5|safe }}|{{ none|e }}|{{ ('%s'|safe)|format('<') }}", None),
    ("err_markup_plus_int", "{{ 'x'|safe + 1 }}", None),
    ("filter_tojson", "{{ d|tojson }} {{ 'é\"\\n\\t'|tojson }} {{ 1.0|tojson }} {{ xs|tojson(indent=2) }} {{ {'b': 1, 'a': {'z': [], 'y': {}}}|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ 'é'|tojson(true) }} {{ n|tojson }} {{ t|tojson }} {{ (1, 2)|tojson }} {{ {1: 'a', none: 'b'}|tojson }}", None),
    ("filter_tojson_indent_nested", "{{ users[0]|tojson(indent=4) }}\n{{ {'a': [1, {'b': 'é'}]}|tojson(indent='\\t') }}", None),
    ("filter_chained_with_args", "{{ words|map('lower')|unique|sort|join(', ')|upper|replace('A', '4') }}", None),
    # methods
    ("str_methods", "{{ '  a b  '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' x '.strip() }} {{ '--x--'.lstrip('-') }} {{ '--x--'.rstrip('-') }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'Hello World'.lower() }} {{ 'it\\'s'.title() }} {{ 'hELLo'.capitalize() }} {{ 'aBc'.swapcase() }}", None),
    ("str_methods_2", "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.index('l') }} {{ 'banana'.count('an') }} {{ '-'.join(['a', 'b']) }} {{ 'x'.center(5, '*') }} {{ 'x'.ljust(3, '.') }}| {{ 'x'.rjust(3) }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'abc'.replace('', '-') }}", None),
    ("str_methods_predicates", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ '  '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ ''.isdigit() }} {{ 'Title Case'.istitle() }}", None),
    ("str_format_method", "{{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='Ann') }} {{ '{:>5}|{:<5}|{:^5}|'.format('a', 'b', 'c') }} {{ '{:.2f} {:5d} {:05d} {:,} {:x} {!r}'.format(3.14159, 42, 42, 1234567, 255, 'q') }} {{ '{{literal}}'.format() }} {{ '{0[k]}'.format({'k': 'v'}) }}", None),
    ("str_percent_operator", "{{ '%s/%s' % ('a', 'b') }} {{ '%d%%' % 50 }} {{ '%05.1f' % 3.14159 }} {{ '%s' % none }} {{ '%s' % [1, 2] }} {{ '%(x)s' % {'x': 'y'} }} {{ '%c' % 65 }} {{ '%e' % 12345.678 }} {{ '%g' % 0.0001 }} {{ '%X' % 255 }} {{ '%+d' % 5 }}", None),
    ("list_methods", "{{ xs.index(2) }} {{ xs.count(1) }} {{ (1, 2, 1).count(1) }} {{ xs.copy() }}", None),
    # globals
    ("global_range", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ range(3)|length }}", None),
    ("global_dict", "{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }} {{ dict([('k', 'v')]) }}", None),
    ("global_cycler_joiner", "{% set c = cycler('odd', 'even') %}{% for x in xs %}{{ c.next() }} {% endfor %}{{ c.current }}{% set j = joiner(' | ') %}{% for x in xs %}{{ j() }}{{ x }}{% endfor %}", None),
    ("global_strftime_now", "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%H:%M:%S %A %B %j') }}", None),
    ("context_overrides_global", "{{ range }}", {"range": "shadowed"}),
    # error cases (the error type and message must match)
    ("err_raise_exception", "a{{ raise_exception('Custom failure: ' ~ 42) }}b", None),
    ("err_raise_in_macro", "{% macro check(x) %}{% if x > 1 %}{{ raise_exception('x too big') }}{% endif %}{% endmacro %}{{ check(1) }}{{ check(2) }}", None),
    ("err_undefined_attr_chain", "{{ d.zz.yy }}", None),
    ("err_undefined_name_attr", "{{ zz.yy }}", None),
    ("err_undefined_none_attr", "{{ n.zz.yy }}", None),
    ("err_undefined_index", "{{ xs[10].yy }}", None),
    ("err_undefined_call", "{{ zz() }}", None),
    ("err_undefined_arith", "{{ zz + 1 }}", None),
    ("err_undefined_concat_plus", "{{ 'a' + zz }}", None),
    ("err_undefined_compare", "{{ zz < 1 }}", None),
    ("err_undefined_param", "{% macro m(a) %}{{ a.x }}{% endmacro %}{{ m() }}", None),
    ("err_cond_no_else", "{{ (1 if false).x }}", None),
    ("err_first_empty", "{{ ([]|first).x }}", None),
    ("err_previtem", "{% for x in xs %}{{ loop.previtem.x }}{% endfor %}", None),
    ("err_namespace_missing", "{% set ns = namespace() %}{{ ns.zz.yy }}", None),
    ("err_concat_binds_tighter_than_plus", "{{ 1 + 2 ~ 3 }}", None),
    ("err_str_plus_int", "{{ 'a' + 1 }}", None),
    ("err_int_plus_str", "{{ 1 + 'a' }}", None),
    ("err_str_plus_none", "{{ 'a' + n }}", None),
    ("err_none_plus_str", "{{ n + 'a' }}", None),
    ("err_list_plus_str", "{{ xs + 'a' }}", None),
    ("err_dict_plus_dict", "{{ d + d }}", None),
    ("err_str_times_str", "{{ 'a' * 'b' }}", None),
    ("err_neg_str", "{{ -'a' }}", None),
    ("err_compare_types", "{{ 1 < 'a' }}", None),
    ("err_compare_types_gt", "{{ 'a' > 1 }}", None),
    ("err_sort_mixed", "{{ [1, 'a']|sort }}", None),
    ("err_in_string_int", "{{ 1 in 'abc' }}", None),
    ("err_in_int", "{{ 1 in 5 }}", None),
    ("err_len_none", "{{ n|length }}", None),
    ("err_len_generator", "{{ xs|select|length }}", None),
    ("err_iterate_none", "{% for x in n %}{% endfor %}", None),
    ("err_iterate_int", "{% for x in 5 %}{% endfor %}", None),
    ("err_unpack_int", "{% for a, b in xs %}{% endfor %}", None),
    ("err_unpack_short", "{% for a, b in [[1]] %}{% endfor %}", None),
    ("err_unpack_long", "{% set a, b = [1, 2, 3] %}", None),
    ("err_call_str", "{{ 'x'() }}", None),
    ("err_join_method_ints", "{{ ', '.join(xs) }}", None),
    ("err_index_missing", "{{ 'abc'.index('z') }}", None),
    ("err_list_index_missing", "{{ xs.index(9) }}", None),
    ("err_split_empty_sep", "{{ 'abc'.split('') }}", None),
    ("err_div_zero", "{{ 1 / 0 }}", None),
    ("err_floordiv_zero", "{{ 1 // 0 }}", None),
    ("err_mod_zero", "{{ 1 % 0 }}", None),
    ("err_float_floordiv_zero", "{{ 1.5 // 0 }}", None),
    ("err_list_append", "{{ xs.append(4) }}", None),
    ("err_dict_update", "{{ d.update({'x': 1}) }}", None),
    ("err_dunder", "{{ ''.__class__() }}", None),
    ("ok_unsafe_attr_is_undefined", "[{{ xs.append }}][{{ xs.append is defined }}][{{ d.pop is defined }}]", None),
    ("err_set_attr_non_namespace", "{% set x = 1 %}{% set x.y = 2 %}", None),
    ("err_macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", None),
    ("err_macro_unknown_kwarg", "{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", None),
    ("err_range_too_big", "{{ range(100001)|length }}", None),
    ("err_items_non_mapping", "{{ xs|items|list }}", None),
    ("err_tojson_undefined", "{{ zz|tojson }}", None),
    ("err_tojson_namespace", "{{ namespace(a=1)|tojson }}", None),
    ("err_last_generator", "{{ xs|select|last }}", None),
    ("err_percent_args", "{{ '%s %s' % ('a',) }}", None),
    ("err_percent_extra", "{{ '%s' % ('a', 'b') }}", None),
    ("err_loop_not_recursive", "{% for x in xs %}{{ loop([]) }}{% endfor %}", None),
    ("err_dictsort_by", "{{ d|dictsort(by='x') }}", None),
    ("err_round_method", "{{ 1.5|round(0, 'up') }}", None),
    ("err_format_mixed", "{{ '%s'|format(1, a=2) }}", None),
    ("errtype_filter_unknown_kw", "{{ xs|join(sep=',') }}", None),
    # syntax errors (only the error type is compared; Kvasir words them its own way)
    ("syntax_unknown_filter", "{{ x|no_such_filter }}", None),
    ("syntax_unknown_test", "{{ x is no_such_test }}", None),
    ("syntax_unclosed_block", "{% if true %}x", None),
    ("unknown_filter_in_if_is_deferred", "{% if false %}{{ x|no_such_filter }}{% endif %}{{ 'ok' if true else y|no_such_filter }}{% if true %}{% set z = 1 %}{% endif %}{{ z }}", None),
    ("err_unknown_filter_in_if_reached", "{% if true %}{{ 'x'|no_such_filter }}{% endif %}", None),
    ("err_unknown_test_in_cond_expr_reached", "{{ 1 if 2 is no_such_test else 3 }}", None),
    ("syntax_unknown_filter_in_loop_in_if", "{% if true %}{% for x in xs %}{{ x|no_such_filter }}{% endfor %}{% endif %}", None),
    ("syntax_unknown_filter_in_macro_in_if", "{% if true %}{% macro m() %}{{ 1|no_such_filter }}{% endmacro %}{% endif %}", None),
    ("syntax_unknown_tag", "{% frobnicate %}", None),
    ("syntax_bad_end", "{% for x in xs %}{% endif %}", None),
    ("syntax_unclosed_var", "{{ x ", None),
    ("syntax_unclosed_comment", "{# x ", None),
    ("syntax_bad_expression", "{{ 1 + }}", None),
    ("syntax_unbalanced", "{{ (1 + 2 }}", None),
    ("syntax_bad_char", "{{ 1 ! 2 }}", None),
    ("syntax_assign_const", "{% set true = 1 %}", None),
    ("syntax_default_order", "{% macro m(a=1, b) %}{% endmacro %}", None),
    ("syntax_break_outside_loop", "{% break %}", None),
    ("syntax_chained_is", "{{ 1 is number is number }}", None),
    ("syntax_do_not_enabled", "{% do xs %}", None),
]


def render_features(env):
    cases = []
    for name, source, context in FEATURES:
        ctx = CTX if context is None else context
        kind, result = run(env, source, ctx)
        case = {"name": name, "template": source}
        if context is not None:
            case["context"] = context
        case[kind] = result
        cases.append(case)
    doc = {"generator": "scripts/gen-template-expectations.py", "jinja2_version": jinja2.__version__,
           "now": NOW, "default_context": CTX, "cases": cases}
    (OUT / "features.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n",
                                       encoding="utf-8")
    return len(cases)


def main():
    env = make_env()
    OUT.mkdir(parents=True, exist_ok=True)
    n_templates = render_templates(env)
    n_features = render_features(env)
    print(f"wrote {n_templates} template cases and {n_features} feature cases to {OUT}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
