// Malformed safetensors files and index files: one case per rejection rule of
// format/safetensors.h, each checking that the message names the file, the tensor or key and
// what is wrong; truncating or corrupting a valid image must never crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kvasir/format/safetensors.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"

namespace kvasir::safetensors {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// An image: the 8-byte size of `header`, `header`, then `data_bytes` bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes = 0) {
  // resize + memcpy, not insert(): GCC 12 warns falsely about insert() here (-Warray-bounds).
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0x5a);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  if (!header.empty()) std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

// The error for `img` ("" when it parsed).
std::string parse_error(const std::vector<uint8_t>& img) {
  try {
    parse_safetensors(img.data(), img.size(), "bad.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
std::string parse_error(const std::string& header, size_t data_bytes = 0) {
  return parse_error(image(header, data_bytes));
}

// A one-tensor header for `entry` (the object's body).
std::string one(const std::string& entry) {
  return "{\"w\":{" + entry + "}}";
}

TEST(SafetensorsMalformed, ValidBaselinesParse) {
  EXPECT_EQ(parse_error("{}"), "");
  EXPECT_EQ(parse_error("{}  \t\r\n  "), "");  // trailing JSON whitespace
  EXPECT_EQ(parse_error(one("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 8), "");
  // Keys in any order, -0 is the integer 0, scalars have shape [].
  EXPECT_EQ(parse_error(one("\"data_offsets\":[0,4],\"shape\":[],\"dtype\":\"I32\""), 4), "");
  EXPECT_EQ(parse_error(one("\"dtype\":\"F32\",\"shape\":[-0],\"data_offsets\":[0,0]")), "");
  EXPECT_EQ(parse_error("{\"__metadata__\":{},\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
                        "\"data_offsets\":[0,1]}}",
                        1),
            "");
  // Tensors in any order in the header; zero-sized ones anywhere, begin == end.
  EXPECT_EQ(parse_error("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
                        "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]},"
                        "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                        "\"e\":{\"dtype\":\"U8\",\"shape\":[0,9],\"data_offsets\":[4,4]}}",
                        4),
            "");
}

TEST(SafetensorsMalformed, ExactMessageFormat) {
  EXPECT_EQ(parse_error(one("\"dtype\":\"F32\",\"dtype\":\"F32\"")),
            "bad.safetensors: duplicate key 'dtype' (tensor 'w'): expected each of dtype, "
            "shape, data_offsets once");
  EXPECT_EQ(parse_error(one("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]"), 4),
            "bad.safetensors: data_offsets [0, 4] hold 4 bytes (tensor 'w'): expected 8 bytes "
            "for shape [2] of F32");
}

struct Case {
  const char* name;
  std::vector<uint8_t> img;
  std::vector<std::string> expect;  // substrings of the message, beyond the file's name
};

std::string f32(const std::string& shape, const std::string& offsets) {
  return "\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + offsets;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](const char* name, std::vector<uint8_t> img, std::vector<std::string> expect) {
    c.push_back({name, std::move(img), std::move(expect)});
  };
  // The 8-byte size and the header's bounds.
  add("short file", std::vector<uint8_t>{1, 2, 3, 4, 5},
      {"file is 5 bytes, too short for the 8-byte header size"});
  {
    std::vector<uint8_t> b = image("{}");
    uint64_t n = kMaxHeaderBytes + 1;
    std::memcpy(b.data(), &n, 8);
    add("header above the limit", b,
        {"header size 100000001 is above the limit", "at most 100000000"});
    n = 3;
    std::memcpy(b.data(), &n, 8);
    add("header past the end", b,
        {"header size 3 runs past the end of the file",
         "expected at most 2 (the file is 10 bytes)"});
  }
  add("empty header", image(""), {"header does not start with '{'"});
  add("header with leading space", image(" {}"), {"header does not start with '{'"});
  add("header an array", image("[]"), {"header does not start with '{'"});
  // JSON.
  add("not JSON", image("{\"a\":"), {"header is not valid JSON"});
  add("trailing garbage", image("{}x"), {"header is not valid JSON", "end of input"});
  add("trailing NUL padding", image(std::string("{}\0\0", 4)),
      {"header holds a NUL byte at offset 10", "padded with spaces"});
  add("NUL then garbage", image(std::string("{}\0{\"w\":5}", 10)), {"a NUL byte at offset 10"});
  add("two objects", image("{}{}"), {"header is not valid JSON"});
  add("invalid UTF-8", image("{\"w\xff\":{}}"), {"header is not valid JSON"});
  add("comment", image("{/*x*/}"), {"header is not valid JSON"});
  // Root keys.
  add("empty tensor name", image("{\"\":{}}"), {"empty tensor name"});
  add("duplicate tensor name",
      image("{\"w\":{" + f32("[1]", "[0,4]") + "},\"w\":{" + f32("[1]", "[4,8]") + "}}", 8),
      {"duplicate tensor name (tensor 'w')", "each name once"});
  add("duplicate tensor name, escaped",
      image("{\"w\":{" + f32("[0]", "[0,0]") + "},\"\\u0077\":{}}"),
      {"duplicate tensor name (tensor 'w')"});
  add("duplicate __metadata__", image("{\"__metadata__\":{},\"__metadata__\":{}}"),
      {"duplicate key '__metadata__'"});
  // __metadata__.
  add("__metadata__ not an object", image("{\"__metadata__\":3}"),
      {"__metadata__ is 3", "an object of string -> string"});
  add("__metadata__ an array", image("{\"__metadata__\":[\"a\"]}"), {"__metadata__ is an array"});
  add("__metadata__ value a number", image("{\"__metadata__\":{\"format\":1}}"),
      {"__metadata__ value is 1 (key 'format')", "expected a string"});
  add("__metadata__ value an object", image("{\"__metadata__\":{\"k\":{}}}"),
      {"__metadata__ value is an object (key 'k')"});
  add("__metadata__ value null", image("{\"__metadata__\":{\"k\":null}}"),
      {"__metadata__ value is null (key 'k')"});
  add("duplicate __metadata__ key", image("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}"),
      {"duplicate __metadata__ key (key 'k')"});
  // Tensor entries.
  add("entry not an object", image("{\"w\":5}"), {"tensor entry is 5 (tensor 'w')"});
  add("entry an array", image("{\"w\":[0,4]}"), {"tensor entry is an array (tensor 'w')"});
  add("entry a string", image("{\"w\":\"F32\"}"), {"tensor entry is a string (tensor 'w')"});
  add("unknown key", image(one(f32("[1]", "[0,4]") + ",\"offsets\":[0,4]"), 4),
      {"unknown key 'offsets' (tensor 'w')", "only dtype, shape and data_offsets"});
  add("missing dtype", image(one("\"shape\":[1],\"data_offsets\":[0,4]"), 4),
      {"missing key 'dtype' (tensor 'w')"});
  add("missing shape", image(one("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4),
      {"missing key 'shape' (tensor 'w')"});
  add("missing data_offsets", image(one("\"dtype\":\"F32\",\"shape\":[1]"), 4),
      {"missing key 'data_offsets' (tensor 'w')"});
  add("duplicate shape", image(one("\"shape\":[1],\"shape\":[1]")),
      {"duplicate key 'shape' (tensor 'w')"});
  // dtype.
  add("unknown dtype", image(one("\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]"), 4),
      {"unknown dtype 'F31' (tensor 'w')", "one of BOOL, U8"});
  add("lower-case dtype", image(one("\"dtype\":\"f32\"")), {"unknown dtype 'f32' (tensor 'w')"});
  add("dtype not a string", image(one("\"dtype\":4")), {"dtype is 4 (tensor 'w')"});
  add("dtype an array", image(one("\"dtype\":[\"F32\"]")), {"dtype is an array (tensor 'w')"});
  // shape.
  add("shape not an array", image(one("\"shape\":2")),
      {"shape is 2 (tensor 'w')", "an array of non-negative integers"});
  add("shape an object", image(one("\"shape\":{}")), {"shape is an object (tensor 'w')"});
  add("negative dimension", image(one("\"shape\":[2,-1]")),
      {"shape[1] is -1 (tensor 'w')", "a non-negative integer"});
  add("float dimension", image(one("\"shape\":[1.0]")), {"shape[0] is 1.0 (tensor 'w')"});
  add("exponent dimension", image(one("\"shape\":[1e3]")), {"shape[0] is 1e3 (tensor 'w')"});
  add("string dimension", image(one("\"shape\":[\"2\"]")), {"shape[0] is a string (tensor 'w')"});
  add("bool dimension", image(one("\"shape\":[true]")), {"shape[0] is true (tensor 'w')"});
  add("nested shape", image(one("\"shape\":[[2]]")), {"shape[0] is an array (tensor 'w')"});
  add("too many dimensions", image(one("\"shape\":[1,1,1,1,1,1,1,1,1]")),
      {"shape has more than 8 dimensions (tensor 'w')", "at most 8"});
  add("dimension at 2^63", image(one("\"shape\":[9223372036854775808]")),
      {"shape[0] is 9223372036854775808 (tensor 'w')", "below 2^63"});
  add("dimension past uint64", image(one("\"shape\":[18446744073709551616]")),
      {"shape[0] is 18446744073709551616 (tensor 'w')"});
  add("element count overflow", image(one(f32("[4294967296,4294967296]", "[0,0]"))),
      {"element count of shape [4294967296, 4294967296] in F32 overflows (tensor 'w')"});
  add("byte count overflow", image(one(f32("[4611686018427387904]", "[0,0]"))),
      {"byte count of shape [4611686018427387904] in F32 overflows (tensor 'w')"});
  // data_offsets.
  add("offsets not an array", image(one(f32("[1]", "4")), 4),
      {"data_offsets is 4 (tensor 'w')", "two integers [begin, end]"});
  add("offsets an object", image(one(f32("[1]", "{}")), 4),
      {"data_offsets is an object (tensor 'w')"});
  add("one offset", image(one(f32("[1]", "[4]")), 4), {"data_offsets has 1 entries (tensor 'w')"});
  add("three offsets", image(one(f32("[1]", "[0,4,8]")), 8),
      {"data_offsets has more than 2 entries (tensor 'w')"});
  add("float offset", image(one(f32("[1]", "[0,4.0]")), 4),
      {"data_offsets[1] is 4.0 (tensor 'w')", "a non-negative integer"});
  add("negative offset", image(one(f32("[1]", "[-4,0]")), 4),
      {"data_offsets[0] is -4 (tensor 'w')"});
  add("null offset", image(one(f32("[1]", "[null,4]")), 4),
      {"data_offsets[0] is null (tensor 'w')"});
  add("begin after end", image(one(f32("[0]", "[8,4]")), 8),
      {"data_offsets [8, 4] have begin > end (tensor 'w')", "begin <= end"});
  add("size mismatch", image(one(f32("[2,2]", "[0,12]")), 12),
      {"data_offsets [0, 12] hold 12 bytes (tensor 'w')", "16 bytes for shape [2, 2] of F32"});
  add("past the data section", image(one(f32("[2]", "[0,8]")), 4),
      {"data_offsets [0, 8] run past the end of the data section (tensor 'w')",
       "end <= 4 (the data section's size)"});
  add("huge offsets", image(one(f32("[1]", "[18446744073709551612,18446744073709551615]")), 4),
      {"hold 3 bytes (tensor 'w')"});
  // Coverage of the data section.
  add("overlap",
      image("{\"a\":{" + f32("[2]", "[0,8]") + "},\"b\":{" + f32("[2]", "[4,12]") + "}}", 12),
      {"data [4, 12) overlaps tensor 'a' at [0, 8) (tensor 'b')", "do not overlap"});
  add("same bytes twice",
      image("{\"a\":{" + f32("[2]", "[0,8]") + "},\"b\":{" + f32("[2]", "[0,8]") + "}}", 8),
      {"overlaps tensor 'a' at [0, 8) (tensor 'b')"});
  add("hole between tensors",
      image("{\"a\":{" + f32("[1]", "[0,4]") + "},\"b\":{" + f32("[1]", "[8,12]") + "}}", 12),
      {"bytes [4, 8) of the data section before this tensor belong to no tensor (tensor 'b')",
       "cover the data section exactly"});
  add("hole at the start", image(one(f32("[1]", "[4,8]")), 8),
      {"bytes [0, 4) of the data section before this tensor belong to no tensor (tensor 'w')"});
  add("bytes after the last tensor", image(one(f32("[1]", "[0,4]")), 8),
      {"bytes [4, 8) at the end of the data section belong to no tensor (after tensor 'w')"});
  add("data without tensors", image("{}", 4),
      {"the data section holds 4 bytes but the header lists no tensors"});
  add("data with metadata only", image("{\"__metadata__\":{\"a\":\"b\"}}", 1),
      {"the data section holds 1 bytes"});
  // Names with odd characters are shown escaped.
  add("odd name", image("{\"a'\\u0001\":5}"), {"tensor entry is 5 (tensor 'a\\x27\\x01')"});
  return c;
}

TEST(SafetensorsMalformed, EachErrorIsReportedClearly) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::string e = parse_error(c.img);
    EXPECT_THAT(e, StartsWith("bad.safetensors: "));
    for (const std::string& s : c.expect) EXPECT_THAT(e, HasSubstr(s));
  }
}

TEST(SafetensorsMalformed, DeepNestingIsRefusedAtOnce) {
  // A million open brackets anywhere in the header: refused at the first misplaced one, without
  // recursion or memory (ASan's stack would overflow otherwise).
  const std::string deep(1000000, '[');
  EXPECT_THAT(parse_error("{\"w\":" + deep), HasSubstr("tensor entry is an array (tensor 'w')"));
  EXPECT_THAT(parse_error(one("\"shape\":" + deep)), HasSubstr("shape[0] is an array"));
  EXPECT_THAT(parse_error("{\"__metadata__\":{\"k\":" + std::string(1000000, '{')),
              HasSubstr("__metadata__ value is an object (key 'k')"));
  // An unterminated huge string: the message stays short.
  std::string e = parse_error("{\"" + std::string(1000000, 'x'));
  EXPECT_THAT(e, HasSubstr("header is not valid JSON"));
  EXPECT_LT(e.size(), 400u);
  // A huge number, in range (quoted in the message) or not (nlohmann's overflow error).
  e = parse_error(one("\"shape\":[0." + std::string(100000, '0') + "1]"));
  EXPECT_THAT(e, HasSubstr("shape[0] is 0.000"));
  EXPECT_LT(e.size(), 400u);
  e = parse_error(one("\"shape\":[1" + std::string(100000, '0') + "]"));
  EXPECT_THAT(e, HasSubstr("number overflow"));
  EXPECT_LT(e.size(), 400u);
}

std::vector<uint8_t> small_valid_image() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add_tensor_copy("a", DType::F32, {2}, std::vector<uint8_t>(8, 1));
  w.add_tensor_copy("b", DType::BF16, {1, 3}, std::vector<uint8_t>(6, 2));
  w.add_tensor_copy("z", DType::U8, {0}, {});
  return w.serialize();
}

TEST(SafetensorsMalformed, EveryTruncationThrowsNeverCrashes) {
  std::vector<uint8_t> img = small_valid_image();
  for (size_t len = 0; len < img.size(); ++len) {
    // A copy of exactly `len` bytes, so ASan would catch any read past it.
    std::vector<uint8_t> prefix(img.begin(), img.begin() + static_cast<ptrdiff_t>(len));
    EXPECT_THAT(parse_error(prefix), StartsWith("bad.safetensors: ")) << "prefix " << len;
  }
  EXPECT_EQ(parse_error(img), "");
}

TEST(SafetensorsMalformed, ByteCorruptionNeverCrashes) {
  std::vector<uint8_t> img = small_valid_image();
  ParsedSafetensors ok = parse_safetensors(img.data(), img.size(), "img");
  size_t parsed_ok = 0;
  for (size_t i = 0; i < 8 + ok.header_size; ++i) {
    for (uint8_t flip : {0xffu, 0x01u, 0x20u}) {
      std::vector<uint8_t> m = img;
      m[i] ^= flip;
      try {
        ParsedSafetensors p = parse_safetensors(m.data(), m.size(), "img");
        for (const auto& t : p.tensors) {
          ASSERT_GE(t.data, m.data());
          ASSERT_LE(t.data + t.nbytes(), m.data() + m.size());
        }
        ++parsed_ok;
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), StartsWith("img: "));
      }
    }
  }
  // Flips inside names and metadata strings still parse: the sweep is not vacuous.
  EXPECT_GT(parsed_ok, 3u);
}

// ---- SafetensorsFile and SafetensorsCheckpoint errors ----

std::string fresh_dir(const std::string& name) {
  fs::path d = fs::path(test_util::temp_dir("kvasir-st-bad")) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string open_error(const std::string& path) {
  try {
    SafetensorsCheckpoint::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SafetensorsMalformed, FileErrorsNameThePath) {
  const std::string dir = fresh_dir("file");
  const std::string path = dir + "/model.safetensors";
  std::vector<uint8_t> img = image(one(f32("[1]", "[0,4]")), 8);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(img.data()), static_cast<std::streamsize>(img.size()));
  const std::string want = path + ": bytes [4, 8) at the end of the data section";
  EXPECT_THAT(open_error(path), HasSubstr(want));
  EXPECT_THAT(open_error(dir), HasSubstr(want));
  std::ofstream(dir + "/empty.safetensors");
  EXPECT_THAT(open_error(dir + "/empty.safetensors"),
              HasSubstr(dir + "/empty.safetensors: file is 0 bytes"));
}

// A folder with shards s1 {a, b} and s2 {c}, and `index` as its index file.
std::string sharded_folder(const std::string& name, const std::string& index) {
  const std::string dir = fresh_dir(name);
  SafetensorsWriter s1, s2;
  s1.add_tensor_copy("a", DType::U8, {1}, {1});
  s1.add_tensor_copy("b", DType::U8, {2}, {2, 3});
  s2.add_tensor_copy("c", DType::U8, {1}, {4});
  s1.write(dir + "/s1.safetensors");
  s2.write(dir + "/s2.safetensors");
  std::ofstream(dir + "/model.safetensors.index.json") << index;
  return dir;
}

const char* kGoodMap = R"({"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"})";
const std::string kGoodIndex = std::string("{\"weight_map\": ") + kGoodMap + "}";

TEST(SafetensorsMalformed, IndexBaselineOpens) {
  const std::string dir = sharded_folder(
      "index-ok", std::string(R"({"metadata": {"total_size": 4, "x": [1, {"y": null}]}, )") +
                      R"("weight_map": )" + kGoodMap + R"(, "extra": [[[]]]})");
  EXPECT_EQ(open_error(dir), "");
  SafetensorsCheckpoint ck = SafetensorsCheckpoint::open(dir);
  EXPECT_EQ(ck.shards().size(), 2u);
  ASSERT_EQ(ck.tensors().size(), 3u);
  EXPECT_EQ(ck.tensors()[2]->name, "c");
  EXPECT_EQ(ck.shard_of("c").path(), dir + "/s2.safetensors");
}

struct IndexCase {
  const char* name;
  std::string index;
  std::vector<std::string> expect;  // after "<index path>: " unless `shard_message`
  bool shard_message = false;       // the message starts with a shard's path
};

TEST(SafetensorsMalformed, IndexErrorsNameTheIndexAndTheKey) {
  const std::vector<IndexCase> cases = {
      {"not JSON", "{\"weight_map\": ", {"not valid JSON"}},
      {"empty", "", {"not valid JSON"}},
      {"an array", "[]", {"the index is an array", "with a weight_map"}},
      {"a string", "\"x\"", {"the index is a string"}},
      {"trailing garbage", std::string("{\"weight_map\": ") + kGoodMap + "} x", {"not valid JSON"}},
      {"NUL then garbage", kGoodIndex + std::string("\0x", 2), {"not valid JSON (a NUL byte"}},
      {"weight_map missing", R"({"metadata": {}})", {"missing key 'weight_map'"}},
      {"weight_map an array", R"({"weight_map": ["s1.safetensors"]})", {"weight_map is an array"}},
      {"weight_map a string", R"({"weight_map": "s1.safetensors"})", {"weight_map is a string"}},
      {"two weight_maps",
       std::string("{\"weight_map\": ") + kGoodMap + ", \"weight_map\": {}}",
       {"duplicate key 'weight_map'"}},
      {"shard not a string",
       R"({"weight_map": {"a": 1}})",
       {"weight_map value is 1 (key 'a')", "a shard file name"}},
      {"shard an object",
       R"({"weight_map": {"a": {}}})",
       {"weight_map value is an object (key 'a')"}},
      {"tensor listed twice",
       R"({"weight_map": {"a": "s1.safetensors", "a": "s2.safetensors"}})",
       {"tensor 'a' is listed twice in weight_map"}},
      {"path escaping the folder",
       R"({"weight_map": {"a": "../x.safetensors"}})",
       {"weight_map value '../x.safetensors' is not a file name in the folder (key 'a')"}},
      {"absolute path",
       R"({"weight_map": {"a": "/etc/passwd"}})",
       {"weight_map value '/etc/passwd' is not a file name in the folder (key 'a')"}},
      {"subfolder",
       R"({"weight_map": {"a": "sub/s1.safetensors"}})",
       {"'sub/s1.safetensors' is not a file name in the folder (key 'a')"}},
      {"dot dot", R"({"weight_map": {"a": ".."}})", {"'..' is not a file name in the folder"}},
      {"empty shard name", R"({"weight_map": {"a": ""}})", {"'' is not a file name"}},
      {"missing shard",
       R"({"weight_map": {"a": "s1.safetensors", "c": "s9.safetensors"}})",
       {"shard 's9.safetensors' does not exist (key 'c')", "/s9.safetensors"}},
      {"tensor the shard lacks",
       R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors", "c": "s1.safetensors"}})",
       {"weight_map maps tensor 'c' to 's1.safetensors', but",
        "s1.safetensors has no such "
        "tensor (key 'c')"}},
  };
  for (const IndexCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = sharded_folder("index-bad", c.index);
    const std::string index = dir + "/model.safetensors.index.json";
    const std::string e = open_error(dir);
    EXPECT_THAT(e, StartsWith(index + ": "));
    for (const std::string& s : c.expect) EXPECT_THAT(e, HasSubstr(s));
  }
}

TEST(SafetensorsMalformed, ShardsMustAgreeWithTheIndex) {
  // A tensor the index maps to the other shard.
  {
    const std::string dir = sharded_folder(
        "wrong-shard",
        R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"}})");
    EXPECT_THAT(open_error(dir),
                AllOf(StartsWith(dir + "/s1.safetensors: holds tensor 'b', which " + dir +
                                 "/model.safetensors.index.json maps to 's2.safetensors'"),
                      HasSubstr("each tensor in one shard")));
  }
  // A tensor in two shard files: the second holds what the index maps to the first.
  {
    const std::string dir = sharded_folder("two-shards", kGoodIndex);
    SafetensorsWriter s2;
    s2.add_tensor_copy("c", DType::U8, {1}, {4});
    s2.add_tensor_copy("a", DType::U8, {1}, {9});
    s2.write(dir + "/s2.safetensors");
    EXPECT_THAT(open_error(dir),
                StartsWith(dir + "/s2.safetensors: holds tensor 'a', which " + dir +
                           "/model.safetensors.index.json maps to 's1.safetensors'"));
  }
  // A shard tensor the index does not list.
  {
    const std::string dir = sharded_folder(
        "unlisted", R"({"weight_map": {"a": "s1.safetensors", "c": "s2.safetensors"}})");
    EXPECT_THAT(open_error(dir), StartsWith(dir + "/s1.safetensors: tensor 'b' is not in " + dir +
                                            "/model.safetensors.index.json"));
  }
  // A malformed shard names the shard.
  {
    const std::string dir = sharded_folder("bad-shard", kGoodIndex);
    std::ofstream(dir + "/s2.safetensors") << "12345678{}";
    EXPECT_THAT(open_error(dir), StartsWith(dir + "/s2.safetensors: header size "));
  }
}

}  // namespace
}  // namespace kvasir::safetensors
