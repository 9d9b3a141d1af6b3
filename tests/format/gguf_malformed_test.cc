// Malformed GGUF images: each must throw kvasir::Error with a message naming the problem and
// where it is; truncating or corrupting a valid image must never crash.
#include <gtest/gtest.h>

#include "gguf_test_util.h"
#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"

namespace kvasir::gguf {
namespace {

using testing::Bytes;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// Parses `b`, returning the error message ("" when it parsed).
std::string parse_error(const Bytes& b) {
  try {
    parse_gguf(b.b.data(), b.b.size(), "img.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One tensor of 8 f32 at offset 0 after `kv` (already counted in n_kv), fully valid.
Bytes one_tensor_image(std::vector<int64_t> ne = {8}, uint32_t type = kF32, uint64_t offset = 0,
                       size_t data_bytes = 32) {
  Bytes b;
  b.header(1, 1).kv_str("general.name", "t");
  b.tensor("w", ne, type, offset).pad(32).zeros(data_bytes);
  return b;
}

TEST(GGUFMalformed, ValidBaselinesParse) {
  EXPECT_EQ(parse_error(one_tensor_image()), "");
  Bytes empty;
  empty.header(0, 0);
  EXPECT_EQ(parse_error(empty), "");
  Bytes v2;
  v2.header(0, 1, 2).kv_u32("a", 1);
  EXPECT_EQ(parse_error(v2), "");
}

TEST(GGUFMalformed, ExactMessageFormat) {
  Bytes b;
  b.header(0, 2).kv_u32("general.alignment", 32).kv_u32("general.alignment", 64);
  EXPECT_EQ(parse_error(b),
            "img.gguf: duplicate key (key 'general.alignment', at offset 57): expected each key "
            "once");
}

struct Case {
  const char* name;
  Bytes image;
  std::vector<std::string> expect;  // substrings of the message
};

std::vector<Case> cases() {
  std::vector<Case> cs;
  auto add = [&](const char* name, Bytes b, std::vector<std::string> expect) {
    cs.push_back({name, std::move(b), std::move(expect)});
  };

  {
    Bytes b;
    b.header(0, 0);
    b.b[0] = 'X';
    add("bad magic", b, {"bad magic 58 47 55 46", "at offset 0", "expected 'GGUF'"});
  }
  {
    Bytes b;
    add("empty file", b, {"file truncated in magic", "at offset 0", "found 0"});
  }
  {
    Bytes b;
    b.header(0, 0, 1);
    add("version 1", b,
        {"unsupported GGUF version 1", "v1 is obsolete", "expected version 2 or 3"});
  }
  {
    Bytes b;
    b.header(0, 0, 4);
    add("version 4", b, {"unsupported GGUF version 4", "at offset 4"});
  }
  {
    Bytes b;
    b.header(0, 0, 0x03000000);
    add("big endian", b, {"big-endian"});
  }
  {
    Bytes b;
    b.header(1ull << 40, 0);
    add("absurd tensor count", b, {"tensor count 1099511627776 cannot fit", "at offset 8"});
  }
  {
    Bytes b;
    b.header(0, ~0ull).kv_u32("a", 1);
    add("absurd kv count", b, {"metadata key count 18446744073709551615 cannot fit"});
  }
  {
    Bytes b;
    b.header(0, 1).str("general.name").u32(8).u64(1000).zeros(10);
    add("string length past end", b,
        {"string value length 1000 runs past the end", "key 'general.name'", "at offset 48",
         "expected a length of at most 10"});
  }
  {
    Bytes b;
    b.header(0, 1).u64(~0ull).zeros(16);
    add("key length past end", b, {"key name length", "(key #0, at offset 24)"});
  }
  {
    Bytes b;
    b.header(0, 1).str("k").u32(4).u8(1).u8(2);
    add("truncated value", b,
        {"file truncated in uint32 value", "key 'k'", "expected 4 more bytes, found 2"});
  }
  {
    Bytes b;
    b.header(0, 1).str("arr").u32(9).u32(4).u64(1ull << 62).zeros(16);
    add("absurd array length", b,
        {"array length 4611686018427387904 of uint32 cannot fit in the 16 bytes left", "key 'arr'",
         "expected at most 4 elements"});
  }
  {
    Bytes b;
    b.header(0, 1).str("k").u32(13).u32(0);
    add("unknown value type", b, {"unknown value type 13", "key 'k'", "0..12"});
  }
  {
    Bytes b;
    b.header(0, 1).str("k").u32(9).u32(99).u64(0);
    add("unknown array element type", b, {"unknown array element type 99", "key 'k'"});
  }
  {
    // 9 levels of arrays: one too many.
    Bytes b;
    b.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < 8; ++i) b.u32(9).u64(1);
    b.u32(4).u64(0);
    add("nesting depth", b, {"arrays nested more than 8 deep", "key 'deep'[0][0][0][0][0][0][0]"});
  }
  {
    Bytes b;
    b.header(0, 1).str("nested").u32(9).u32(9).u64(2);
    b.u32(4).u64(1).u32(7);  // item 0: [7]
    b.u32(7).u64(1).u8(2);   // item 1: [bool 2]
    add("bad bool in nested array", b, {"bool value 2", "key 'nested'[1][0]", "expected 0 or 1"});
  }
  {
    Bytes b;
    b.header(0, 1).str("").u32(4).u32(0);
    add("empty key", b, {"empty key name", "key #0"});
  }
  {
    Bytes b;
    b.header(0, 2).kv_u32("a", 1).kv_u32("a", 2);
    add("duplicate key", b, {"duplicate key", "key 'a'"});
  }
  {
    Bytes b;
    b.header(0, 1).str("general.alignment").u32(5).u32(32);
    add("alignment wrong type", b, {"general.alignment has type int32", "expected uint32"});
  }
  {
    Bytes b;
    b.header(0, 1).kv_u32("general.alignment", 0);
    add("alignment zero", b, {"general.alignment is 0", "expected a nonzero power of two"});
  }
  {
    Bytes b;
    b.header(0, 1).kv_u32("general.alignment", 48);
    add("alignment not power of two", b, {"general.alignment is 48"});
  }
  add("unknown dtype", one_tensor_image({8}, 4),
      {"unknown tensor type id 4", "tensor 'w'", "at offset 78"});
  add("unknown dtype large", one_tensor_image({8}, 1000), {"unknown tensor type id 1000"});
  add("zero dim", one_tensor_image({8, 0}), {"ne[1] is 0", "tensor 'w'", "expected a positive"});
  add("negative dim", one_tensor_image({-8}), {"ne[0] is -8"});
  add("element count overflow", one_tensor_image({1ll << 32, 1ll << 32}),
      {"element count overflows int64 at ne[1] = 4294967296", "tensor 'w'"});
  add("byte size overflow", one_tensor_image({1ll << 62, 1}, 28 /*f64*/),
      {"tensor byte size overflows"});
  add("block size", one_tensor_image({33}, kQ8_0),
      {"ne[0] = 33 is not a multiple of the q8_0 block size 32", "tensor 'w'",
       "expected ne[0] divisible by 32"});
  {
    Bytes b;
    b.header(1, 1).kv_str("general.name", "t").tensor("w", {8, 1, 1, 1, 1}, kF32, 0);
    add("too many dims", b, {"tensor has 5 dimensions", "expected 1 to 4"});
  }
  {
    Bytes b;
    b.header(1, 1).kv_str("general.name", "t").tensor("w", {}, kF32, 0).zeros(8);
    add("zero dims", b, {"tensor has 0 dimensions"});
  }
  add("unaligned offset", one_tensor_image({8}, kF32, 4, 64),
      {"data offset 4 is not aligned", "tensor 'w'", "expected a multiple of the alignment 32"});
  add("data past end", one_tensor_image({8}, kF32, 0, 31),
      {"tensor data [0, 32) in the data section at offset 96 runs past the end", "tensor 'w'",
       "within the 31 bytes"});
  add("offset past end", one_tensor_image({8}, kF32, 1ull << 60, 32), {"runs past the end"});
  {
    Bytes b;
    b.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad(32).zeros(64);
    add("overlap", b, {"tensor 'b'", "overlaps tensor 'a' at [0, 64)"});
  }
  {
    Bytes b;
    b.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 0).pad(32).zeros(64);
    add("same offset", b, {"overlaps tensor"});
  }
  {
    Bytes b;
    b.header(2, 0).tensor("a", {8}, kF32, 0).tensor("a", {8}, kF32, 32).pad(32).zeros(64);
    add("duplicate tensor", b, {"duplicate tensor name", "tensor 'a'"});
  }
  {
    Bytes b;
    b.header(1, 0).tensor("", {8}, kF32, 0).pad(32).zeros(32);
    add("empty tensor name", b, {"empty tensor name", "tensor #0"});
  }
  {
    Bytes b;
    b.header(1, 0).tensor("w", {8}, kF32, 0);
    add("no data section", b, {"starts past the end of the file"});
  }
  {
    Bytes b;
    b.header(0, 1).str("bad\x01name").u32(13);
    add("unprintable key is escaped", b, {"key 'bad\\x01name'"});
  }
  return cs;
}

TEST(GGUFMalformed, EachErrorIsReportedClearly) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::string msg = parse_error(c.image);
    ASSERT_FALSE(msg.empty()) << "parsed without error";
    EXPECT_EQ(msg.rfind("img.gguf: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("): expected "), std::string::npos) << msg;
    for (const std::string& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << msg;
  }
}

TEST(GGUFMalformed, MaxNestingDepthIsAccepted) {
  Bytes b;
  b.header(0, 1).str("deep").u32(9);
  for (int i = 0; i < 7; ++i) b.u32(9).u64(1);
  b.u32(4).u64(1).u32(42);
  ParsedGGUF p = parse_gguf(b.b.data(), b.b.size(), "img");
  const Value* v = &p.kv.at(0).second;
  for (int i = 0; i < 8; ++i) v = &v->as_array().items.at(0);
  EXPECT_EQ(v->as_int(), 42);
}

TEST(GGUFMalformed, AlignmentKeyMovesTheDataSection) {
  Bytes b;
  b.header(1, 1).kv_u32("general.alignment", 256).tensor("w", {8}, kF32, 0).pad(256).zeros(32);
  ParsedGGUF p = parse_gguf(b.b.data(), b.b.size(), "img");
  EXPECT_EQ(p.alignment, 256u);
  EXPECT_EQ(p.data_offset, 256u);
  EXPECT_EQ(p.tensors.at(0).data, b.b.data() + 256);
  // With 256-byte alignment an offset of 32 is misaligned.
  Bytes c;
  c.header(1, 1).kv_u32("general.alignment", 256).tensor("w", {8}, kF32, 32).pad(256).zeros(64);
  EXPECT_NE(parse_error(c).find("data offset 32 is not aligned"), std::string::npos);
}

// A small valid image with every kind of field, written by GGUFWriter.
std::vector<uint8_t> small_valid_image(uint64_t* required_end) {
  GGUFWriter w;
  w.set("general.architecture", Value::str("llama"));
  w.set("u8", Value::u8(7));
  w.set("f64", Value::f64(0.25));
  w.set("flag", Value::boolean(true));
  w.set("toks", Value::string_array({"a", "bc", ""}));
  w.set("nested", Value::array(ValueType::ARRAY, {Value::i32_array({1, 2}), Value::i32_array({})}));
  std::vector<uint8_t> q(34, 1);
  w.add_tensor_copy("q", DType::Q8_0, {32}, q);
  w.add_tensor_copy("f", DType::F16, {3, 2}, std::vector<uint8_t>(12, 2));
  std::vector<uint8_t> img = w.serialize();
  ParsedGGUF p = parse_gguf(img.data(), img.size(), "img");
  *required_end = 0;
  for (const auto& t : p.tensors) {
    *required_end = std::max(*required_end, p.data_offset + t.offset + t.nbytes);
  }
  return img;
}

TEST(GGUFMalformed, EveryTruncationThrowsNeverCrashes) {
  uint64_t required_end = 0;
  std::vector<uint8_t> img = small_valid_image(&required_end);
  ASSERT_LT(required_end, img.size());  // the final padding is present
  for (size_t len = 0; len <= img.size(); ++len) {
    // A copy of exactly `len` bytes, so ASan would catch any read past it.
    std::vector<uint8_t> prefix(img.begin(), img.begin() + static_cast<ptrdiff_t>(len));
    bool threw = false;
    try {
      parse_gguf(prefix.data(), prefix.size(), "cut.gguf");
    } catch (const Error& e) {
      threw = true;
      EXPECT_EQ(std::string(e.what()).rfind("cut.gguf: ", 0), 0u) << e.what();
    }
    // Only the trailing padding after the last tensor may be cut without error.
    EXPECT_EQ(threw, len < required_end) << "prefix length " << len;
  }
}

TEST(GGUFMalformed, ByteCorruptionNeverCrashes) {
  uint64_t required_end = 0;
  std::vector<uint8_t> img = small_valid_image(&required_end);
  ParsedGGUF ok = parse_gguf(img.data(), img.size(), "img");
  size_t parsed_ok = 0;
  for (size_t i = 0; i < ok.data_offset; ++i) {
    for (uint8_t flip : {0xffu, 0x01u, 0x80u}) {
      std::vector<uint8_t> m = img;
      m[i] ^= flip;
      try {
        ParsedGGUF p = parse_gguf(m.data(), m.size(), "img");
        for (const auto& t : p.tensors) {
          ASSERT_GE(t.data, m.data());
          ASSERT_LE(t.data + t.nbytes, m.data() + m.size());
        }
        ++parsed_ok;
      } catch (const Error&) {
      }
    }
  }
  // Flips inside values (e.g. string bytes, numbers) still parse: the sweep is not vacuous.
  EXPECT_GT(parsed_ok, 10u);
}

}  // namespace
}  // namespace kvasir::gguf
