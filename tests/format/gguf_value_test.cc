// Metadata values: accessors, display form, type names and the consistency check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"

namespace kvasir::gguf {
namespace {

TEST(GGUFValue, LenientNumericAccessors) {
  EXPECT_EQ(Value::u8(200).as_int(), 200);
  EXPECT_EQ(Value::i32(-5).as_int(), -5);
  EXPECT_EQ(Value::boolean(true).as_int(), 1);
  EXPECT_EQ(Value::f32(3.75f).as_int(), 3);
  EXPECT_EQ(Value::i64(7).as_uint(), 7u);
  EXPECT_DOUBLE_EQ(Value::i32(-5).as_float(), -5.0);
  EXPECT_DOUBLE_EQ(Value::f32(0.5f).as_float(), 0.5);
  EXPECT_TRUE(Value::u32(2).as_bool());
  EXPECT_FALSE(Value::f64(0.0).as_bool());
  EXPECT_THROW(Value::u64(std::numeric_limits<uint64_t>::max()).as_int(), Error);
  EXPECT_THROW(Value::i32(-1).as_uint(), Error);
  EXPECT_THROW(Value::f64(1e30).as_int(), Error);
  EXPECT_THROW(Value::f64(std::nan("")).as_int(), Error);
  EXPECT_THROW(Value::str("1").as_int(), Error);
  EXPECT_THROW(Value::str("1").as_float(), Error);
  EXPECT_THROW(Value::u8(1).as_string(), Error);
  EXPECT_THROW(Value::u8(1).as_array(), Error);
  EXPECT_EQ(Value::str("abc").as_string(), "abc");
  EXPECT_EQ(Value::i32_array({1, 2}).as_array().items.size(), 2u);
}

TEST(GGUFValue, Display) {
  EXPECT_EQ(Value::u32(64).to_display(), "64");
  EXPECT_EQ(Value::i8(-3).to_display(), "-3");
  EXPECT_EQ(Value::f32(1e-5f).to_display(), "1e-05");  // shortest float form, not the double's
  EXPECT_EQ(Value::f64(0.1).to_display(), "0.1");
  EXPECT_EQ(Value::boolean(true).to_display(), "true");
  EXPECT_EQ(Value::str("llama").to_display(), "\"llama\"");
  EXPECT_EQ(Value::str("a\"b\\c\n\x01").to_display(), "\"a\\\"b\\\\c\\n\\x01\"");
  EXPECT_EQ(Value::i32_array({1, 2, 3}).to_display(), "[1, 2, 3]");
  EXPECT_EQ(Value::i32_array({1, 2, 3}).to_display(2), "[1, 2, ... (3 items)]");
  EXPECT_EQ(Value::string_array({"<s>", "</s>"}).to_display(), "[\"<s>\", \"</s>\"]");
  EXPECT_EQ(
      Value::array(ValueType::ARRAY, {Value::i32_array({1}), Value::i32_array({})}).to_display(),
      "[[1], []]");
  EXPECT_EQ(Value::array(ValueType::UINT8, {}).to_display(), "[]");
  EXPECT_EQ(Value::array(ValueType::UINT8, {Value::u8(1)}).to_display(0), "[... (1 items)]");
  // Long strings are cut on a UTF-8 boundary: 30 three-byte characters = 90 bytes.
  std::string s;
  for (int i = 0; i < 30; ++i) s += "\xe2\x96\x81";
  std::string d = Value::str(s).to_display();
  EXPECT_EQ(d, "\"" + s.substr(0, 63) + "\"... (90 bytes)");
}

TEST(GGUFValue, TypeNames) {
  EXPECT_EQ(value_type_name(ValueType::FLOAT32), "float32");
  EXPECT_EQ(Value::u8(1).type_name(), "uint8");
  EXPECT_EQ(Value::string_array({}).type_name(), "array[string]");
  EXPECT_EQ(Value::array(ValueType::ARRAY, {Value::i32_array({})}).type_name(),
            "array[array[int32]]");
  EXPECT_TRUE(Value::i16(1).is_integer());
  EXPECT_FALSE(Value::boolean(true).is_integer());
  EXPECT_TRUE(Value::f64(1).is_float());
}

TEST(GGUFValue, ConsistencyCheck) {
  EXPECT_EQ(Value::u16(65535).check_consistent(), "");
  EXPECT_EQ(Value::i8(-128).check_consistent(), "");
  EXPECT_NE(Value(Value{ValueType::INT8, int64_t{128}}).check_consistent(), "");
  EXPECT_NE(Value(Value{ValueType::UINT32, uint64_t{1} << 32}).check_consistent(), "");
  EXPECT_NE(Value(Value{ValueType::INT32, int64_t{-(int64_t{1} << 31) - 1}}).check_consistent(),
            "");
  EXPECT_EQ(Value(Value{ValueType::INT32, int64_t{-(int64_t{1} << 31)}}).check_consistent(), "");
  EXPECT_NE(Value(Value{ValueType::STRING, uint64_t{1}}).check_consistent(), "");
  EXPECT_NE(Value::array(static_cast<ValueType>(13), {}).check_consistent(), "");
}

TEST(GGUFValue, Equality) {
  EXPECT_EQ(Value::u8(1), Value::u8(1));
  EXPECT_NE(Value::u8(1), Value::u32(1));  // same number, different type
  EXPECT_NE(Value::i32_array({1, 2}), Value::i32_array({1, 3}));
  EXPECT_EQ(Value::string_array({"a"}), Value::string_array({"a"}));
}

}  // namespace
}  // namespace kvasir::gguf
