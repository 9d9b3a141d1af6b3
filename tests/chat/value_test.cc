// Python formatting primitives of the value layer, checked against what CPython prints
// (the expected strings are CPython 3.11 output).
#include "kvasir/chat/value.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kvasir/chat/json_value.h"
#include "kvasir/chat/lexer.h"
#include "kvasir/chat/py_format.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {
namespace {

TEST(ChatValue, FloatReprMatchesPython) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
  EXPECT_EQ(float_repr(-2.5), "-2.5");
  EXPECT_EQ(float_repr(5e-324), "5e-324");
  EXPECT_EQ(float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(float_repr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(float_repr(std::nan("")), "nan");
}

TEST(ChatValue, StringReprMatchesPython) {
  EXPECT_EQ(repr_string("abc"), "'abc'");
  EXPECT_EQ(repr_string("it's"), "\"it's\"");
  EXPECT_EQ(repr_string("it's \"x\""), "'it\\'s \"x\"'");
  EXPECT_EQ(repr_string("a\tb\nc\r\\"), "'a\\tb\\nc\\r\\\\'");
  EXPECT_EQ(repr_string("\x01\x7f"), "'\\x01\\x7f'");
  EXPECT_EQ(repr_string("\u00a0\u00e9\u2028\u4f60"), "'\\xa0\u00e9\\u2028\u4f60'");
  EXPECT_EQ(repr_string("\xff"), "'\\udcff'");  // an invalid byte, as surrogateescape shows it
}

TEST(ChatValue, PercentFormat) {
  EXPECT_EQ(percent_format("%s|%5d|%-4s|%.3f|%x|%%",
                           make_tuple({Value::string("a"), Value::integer(42), Value::string("b"),
                                       Value::number(2.0 / 3), Value::integer(-255)})),
            "a|   42|b   |0.667|-ff|%");
  EXPECT_THROW(percent_format("%s %s", make_tuple({Value::string("a")})), TemplateError);
}

TEST(ChatValue, JsonDumpsMatchesPython) {
  nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(R"({"b": [1, 2.5, "é\n", null, true], "a": {}})");
  Value v = from_json(j);
  JsonDumpOptions plain;
  EXPECT_EQ(to_json(v, plain), "{\"b\": [1, 2.5, \"é\\n\", null, true], \"a\": {}}");
  JsonDumpOptions pretty;
  pretty.indent = "  ";
  pretty.sort_keys = true;
  EXPECT_EQ(
      to_json(v, pretty),
      "{\n  \"a\": {},\n  \"b\": [\n    1,\n    2.5,\n    \"é\\n\",\n    null,\n    true\n  ]\n}");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(to_json(Value::string("é🙂\x1f"), ascii), "\"\\u00e9\\ud83d\\ude42\\u001f\"");
}

TEST(ChatValue, EqualityAndOrderFollowPython) {
  EXPECT_TRUE(equals(Value::integer(1), Value::number(1.0)));
  EXPECT_TRUE(equals(Value::boolean(true), Value::integer(1)));
  EXPECT_FALSE(equals(Value::integer(1), Value::string("1")));
  EXPECT_FALSE(equals(make_tuple({Value::integer(1)}), make_list({Value::integer(1)})));
  EXPECT_TRUE(equals(Value(), Value()));  // Undefined == Undefined
  EXPECT_FALSE(equals(Value(), Value::none()));
  EXPECT_TRUE(less(Value::string("B"), Value::string("a")));
  EXPECT_THROW(less(Value::integer(1), Value::string("a")), TemplateError);
}

TEST(ChatValue, Utf8CodePoints) {
  EXPECT_EQ(unicode::length("h\xc3\xa9\xf0\x9f\x99\x82"), 3u);
  EXPECT_EQ(unicode::upper("stra\xc3\x9f"
                           "e \xc3\xa9t\xc3\xa9"),
            "STRASSE \xc3\x89T\xc3\x89");
  EXPECT_EQ(unicode::lower("\xce\x91\xce\x92 \xd0\x96"), "\xce\xb1\xce\xb2 \xd0\xb6");
  std::string bad = "a\xff\xc3";
  EXPECT_EQ(unicode::encode(unicode::decode(bad)), bad);
}

TEST(ChatLexer, WhitespaceControlTokens) {
  auto toks = tokenize("a \n  {%- if x -%}  b  {%+ endif +%}\n");
  ASSERT_GE(toks.size(), 3u);
  EXPECT_EQ(toks[0].type, Tok::Data);
  EXPECT_EQ(toks[0].text, "a");  // "-" removed the spaces and the newline
  std::string data;
  for (const auto& t : toks)
    if (t.type == Tok::Data) data += "[" + t.text + "]";
  EXPECT_EQ(data, "[a][b  ]");  // "+%}" kept the newline, but it was the final one (dropped)
  EXPECT_EQ(toks.back().type, Tok::Eof);
}

}  // namespace
}  // namespace kvasir::chat
