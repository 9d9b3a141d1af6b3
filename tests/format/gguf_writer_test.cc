// GGUFWriter: round trips through the reader (every value type, nested arrays, tensors,
// alignment), atomic writes, and validation of what is added.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "gguf_test_util.h"
#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"
#include "test_util/paths.h"

namespace kvasir::gguf {
namespace {

using testing::ScratchDir;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::pair<std::string, Value>> every_type_metadata() {
  std::vector<std::pair<std::string, Value>> kv;
  auto add = [&](std::string k, Value v) { kv.emplace_back(std::move(k), std::move(v)); };
  add("t.u8", Value::u8(255));
  add("t.i8", Value::i8(-128));
  add("t.u16", Value::u16(65535));
  add("t.i16", Value::i16(-32768));
  add("t.u32", Value::u32(4000000000u));
  add("t.i32", Value::i32(-2000000000));
  add("t.f32", Value::f32(1e-5f));
  add("t.bool", Value::boolean(false));
  add("t.string", Value::str(std::string("utf8 \xe2\x96\x81 and a \0 nul", 20)));
  add("t.empty_string", Value::str(""));
  add("t.u64", Value::u64(std::numeric_limits<uint64_t>::max()));
  add("t.i64", Value::i64(std::numeric_limits<int64_t>::min()));
  add("t.f64", Value::f64(-1.0 / 3.0));
  add("a.u8", Value::array(ValueType::UINT8, {Value::u8(0), Value::u8(200)}));
  add("a.i8", Value::array(ValueType::INT8, {Value::i8(-1), Value::i8(127)}));
  add("a.u16", Value::array(ValueType::UINT16, {Value::u16(1)}));
  add("a.i16", Value::array(ValueType::INT16, {Value::i16(-2)}));
  add("a.u32", Value::array(ValueType::UINT32, {Value::u32(3), Value::u32(4)}));
  add("a.i32", Value::i32_array({-5, 6, 7}));
  add("a.f32", Value::f32_array({0.5f, -0.0f, std::numeric_limits<float>::infinity()}));
  add("a.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
  add("a.string", Value::string_array({"<unk>", "", "\xe2\x96\x81the"}));
  add("a.u64", Value::array(ValueType::UINT64, {Value::u64(1ull << 40)}));
  add("a.i64", Value::array(ValueType::INT64, {Value::i64(-(1ll << 40))}));
  add("a.f64", Value::array(ValueType::FLOAT64, {Value::f64(1e300)}));
  add("a.empty", Value::array(ValueType::FLOAT32, {}));
  add("a.nested", Value::array(ValueType::ARRAY, {Value::i32_array({1, 2}), Value::i32_array({}),
                                                  Value::string_array({"x"})}));
  add("a.nested3",
      Value::array(ValueType::ARRAY, {Value::array(ValueType::ARRAY, {Value::f32_array({1.5f})})}));
  return kv;
}

struct TestTensor {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<TestTensor> test_tensors() {
  auto pattern = [](size_t n, uint8_t seed) {
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 31 + seed);
    return b;
  };
  return {
      {"f32.vec", DType::F32, {5}, pattern(20, 1)},  // 20 bytes: padding needed after it
      {"f16.mat", DType::F16, {3, 7}, pattern(42, 2)},
      {"q8.mat", DType::Q8_0, {64, 3}, pattern(34 * 2 * 3, 3)},
      {"q4k.4d", DType::Q4_K, {256, 1, 2, 1}, pattern(144 * 2, 4)},
      {"i32.3d", DType::I32, {2, 3, 4}, pattern(96, 5)},
  };
}

GGUFWriter make_writer(const std::vector<TestTensor>& ts) {
  GGUFWriter w;
  for (auto& [k, v] : every_type_metadata()) w.set(k, v);
  for (const auto& t : ts) w.add_tensor(t.name, t.type, t.shape, t.bytes.data(), t.bytes.size());
  return w;
}

void expect_round_trip(const ParsedGGUF& p, const std::vector<TestTensor>& ts, uint32_t alignment,
                       size_t file_size) {
  EXPECT_EQ(p.version, 3u);
  EXPECT_EQ(p.alignment, alignment);
  EXPECT_EQ(p.data_offset % alignment, 0u);
  auto expect_kv = every_type_metadata();
  if (alignment != kDefaultAlignment)
    expect_kv.emplace_back("general.alignment", Value::u32(alignment));
  ASSERT_EQ(p.kv.size(), expect_kv.size());
  for (size_t i = 0; i < p.kv.size(); ++i) {
    EXPECT_EQ(p.kv[i].first, expect_kv[i].first);  // insertion order kept
    EXPECT_TRUE(p.kv[i].second == expect_kv[i].second)
        << p.kv[i].first << ": " << p.kv[i].second.to_display() << " vs "
        << expect_kv[i].second.to_display();
  }
  ASSERT_EQ(p.tensors.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorInfo& t = p.tensors[i];
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(t.type, ts[i].type);
    EXPECT_EQ(t.shape, ts[i].shape);
    EXPECT_EQ(t.offset % alignment, 0u) << t.name;
    ASSERT_EQ(t.nbytes, ts[i].bytes.size());
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), ts[i].bytes) << t.name;
  }
  EXPECT_EQ(file_size % alignment, 0u);  // each tensor, the last included, is padded
}

TEST(GGUFWriter, RoundTripInMemoryAtSeveralAlignments) {
  auto ts = test_tensors();
  GGUFWriter w = make_writer(ts);
  for (uint32_t alignment : {1u, 32u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    std::vector<uint8_t> img = w.serialize(alignment);
    ParsedGGUF p = parse_gguf(img.data(), img.size(), "mem");
    expect_round_trip(p, ts, alignment, img.size());
  }
}

TEST(GGUFWriter, WriteFileIsAtomicAndMatchesSerialize) {
  ScratchDir dir;
  auto ts = test_tensors();
  GGUFWriter w = make_writer(ts);
  std::string path = dir.file("out.gguf");
  w.write(path, 64);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(read_bytes(path), w.serialize(64));
  GGUFFile f(path);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_int("general.alignment"), 64);
  ParsedGGUF p;
  p.version = f.version();
  p.alignment = f.alignment();
  p.data_offset = f.data_offset();
  p.kv = f.metadata();
  p.tensors = f.tensors();
  expect_round_trip(p, ts, 64, f.file_size());

  // Overwriting replaces the file as a whole.
  GGUFWriter small;
  small.set("only", Value::u8(1));
  small.write(path);
  GGUFFile g(path);
  EXPECT_EQ(g.metadata().size(), 1u);
  EXPECT_TRUE(g.tensors().empty());
}

TEST(GGUFWriter, WriteErrorsNameThePathAndLeaveNothing) {
  ScratchDir dir;
  GGUFWriter w;
  w.set("k", Value::u8(1));
  std::string path = dir.file("missing-dir/out.gguf");
  try {
    w.write(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot create", 0), 0u) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));

  // Rename onto a directory fails after the temp file was written: it must be removed.
  std::filesystem::create_directory(dir.file("adir"));
  std::filesystem::create_directory(dir.file("adir/child"));
  try {
    w.write(dir.file("adir"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot rename"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("adir.tmp")));
}

TEST(GGUFWriter, SetReplacesInPlace) {
  GGUFWriter w;
  w.set("a", Value::u8(1));
  w.set("b", Value::u8(2));
  w.set("a", Value::str("x"));
  auto img = w.serialize();
  ParsedGGUF p = parse_gguf(img.data(), img.size(), "mem");
  ASSERT_EQ(p.kv.size(), 2u);
  EXPECT_EQ(p.kv[0].first, "a");
  EXPECT_EQ(p.kv[0].second.as_string(), "x");
  EXPECT_EQ(p.kv[1].first, "b");
}

TEST(GGUFWriter, AlignmentKeyFollowsTheWriteArgument) {
  GGUFWriter w;
  w.set("general.alignment", Value::u32(128));
  w.set("z", Value::u8(0));
  w.add_tensor_copy("t", DType::F32, {3}, std::vector<uint8_t>(12, 9));
  auto img = w.serialize(16);
  ParsedGGUF p = parse_gguf(img.data(), img.size(), "mem");
  EXPECT_EQ(p.alignment, 16u);
  EXPECT_EQ(p.kv.at(0).first, "general.alignment");
  EXPECT_EQ(p.kv.at(0).second.as_uint(), 16u);
  EXPECT_EQ(p.data_offset % 16, 0u);

  GGUFWriter plain;
  plain.set("z", Value::u8(0));
  auto img32 = plain.serialize();
  ParsedGGUF q = parse_gguf(img32.data(), img32.size(), "mem");
  EXPECT_EQ(q.kv.size(), 1u);  // no general.alignment at the default
}

TEST(GGUFWriter, RejectsBadInput) {
  GGUFWriter w;
  std::vector<uint8_t> b(32);
  auto msg = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([&] { w.add_tensor("t", DType::F32, {7}, b.data(), 32); }).find("28"),
            std::string::npos);
  EXPECT_NE(msg([&] { w.add_tensor("t", DType::Q8_0, {16}, b.data(), 32); }).find("block size 32"),
            std::string::npos);
  EXPECT_NE(msg([&] { w.add_tensor("t", DType::F32, {}, b.data(), 0); }).find("dimensions"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              w.add_tensor("t", DType::F32, {8, 0}, b.data(), 0);
            }).find("ne[1] = 0"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              w.add_tensor(std::string(64, 'n'), DType::F32, {8}, b.data(), 32);
            }).find("at most 63"),
            std::string::npos);
  w.add_tensor("t", DType::F32, {8}, b.data(), 32);
  EXPECT_NE(msg([&] { w.add_tensor("t", DType::F32, {8}, b.data(), 32); }).find("duplicate"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              w.set("k", Value{ValueType::UINT8, uint64_t{300}});
            }).find("value 300 does not fit uint8"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              w.set("k", Value{ValueType::INT32, uint64_t{1}});
            }).find("signed"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              w.set("k", Value::array(ValueType::INT32, {Value::u8(1)}));
            }).find("array item 0 has type uint8, expected int32"),
            std::string::npos);
  EXPECT_NE(msg([&] { w.set("general.alignment", Value::u32(3)); }).find("power of two"),
            std::string::npos);
  EXPECT_NE(msg([&] { w.serialize(24); }).find("power of two"), std::string::npos);
  EXPECT_NE(msg([&] { w.set("", Value::u8(1)); }).find("empty"), std::string::npos);
  Value deep = Value::i32_array({1});
  for (int i = 0; i < kMaxArrayDepth - 1; ++i) deep = Value::array(ValueType::ARRAY, {deep});
  EXPECT_EQ(msg([&] { w.set("deep", deep); }), "no error");  // kMaxArrayDepth levels: fine
  deep = Value::array(ValueType::ARRAY, {deep});
  EXPECT_NE(msg([&] { w.set("deeper", deep); }).find("nested"), std::string::npos);
}

// Rewriting the shared model reproduces it byte for byte: our layout is llama.cpp's.
TEST(GGUFWriter, RewritesStories260KIdentically) {
  std::string path = test_util::stories260k_path();
  GGUFFile f(path);
  GGUFWriter w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const TensorInfo& t : f.tensors()) w.add_tensor(t.name, t.type, t.shape, t.data, t.nbytes);
  std::vector<uint8_t> img = w.serialize(static_cast<uint32_t>(f.alignment()));
  std::vector<uint8_t> orig = read_bytes(path);
  ASSERT_EQ(img.size(), orig.size());
  EXPECT_TRUE(img == orig);
}

}  // namespace
}  // namespace kvasir::gguf
