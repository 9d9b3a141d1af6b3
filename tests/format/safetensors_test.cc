// safetensors round trips (SafetensorsWriter -> parse_safetensors / SafetensorsFile /
// SafetensorsCheckpoint), the writer's exact layout, sharded checkpoints, and the real
// tinystories-656k checkpoint.
#include "kvasir/format/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir::safetensors {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr DType kAll[] = {DType::BOOL, DType::U8,   DType::I8,  DType::U16,     DType::I16,
                          DType::F16,  DType::BF16, DType::U32, DType::I32,     DType::F32,
                          DType::U64,  DType::I64,  DType::F64, DType::F8_E4M3, DType::F8_E5M2};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13);
  return v;
}

// A fresh folder for one test.
std::string fresh_dir(const std::string& name) {
  fs::path d = fs::path(test_util::temp_dir("kvasir-st")) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string header_of(const std::vector<uint8_t>& img) {
  uint64_t n = 0;
  std::memcpy(&n, img.data(), 8);
  return std::string(reinterpret_cast<const char*>(img.data()) + 8, n);
}

// A writer holding one tensor of every dtype, shaped {2, 3} (or {3} for odd ones), plus metadata.
SafetensorsWriter every_dtype_writer() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("note", "every dtype, \"quoted\" and \\ and \u00e9");
  uint8_t seed = 1;
  for (DType t : kAll) {
    std::vector<int64_t> shape = (seed % 2) ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{3};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    w.add_tensor_copy(std::string("t.") + std::string(dtype_name(t)), t, shape,
                      pattern(static_cast<size_t>(n) * dtype_size(t), seed++));
  }
  return w;
}

TEST(Safetensors, DTypeNamesSizesAndParse) {
  const std::vector<std::pair<std::string, size_t>> want = {
      {"BOOL", 1}, {"U8", 1},   {"I8", 1},  {"U16", 2},     {"I16", 2},
      {"F16", 2},  {"BF16", 2}, {"U32", 4}, {"I32", 4},     {"F32", 4},
      {"U64", 8},  {"I64", 8},  {"F64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  ASSERT_EQ(std::size(kAll), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(dtype_name(kAll[i]), want[i].first);
    EXPECT_EQ(dtype_size(kAll[i]), want[i].second) << want[i].first;
    EXPECT_EQ(parse_dtype(want[i].first, "x"), kAll[i]);
  }
  EXPECT_THAT(error_of([] { parse_dtype("float32", "cfg.json: torch_dtype"); }),
              HasSubstr("cfg.json: torch_dtype: unknown dtype 'float32': expected one of BOOL, "));
  EXPECT_THAT(error_of([] { parse_dtype("f32", "w"); }), HasSubstr("unknown dtype 'f32'"));
}

TEST(Safetensors, SerializeParseRoundTripEveryDtype) {
  SafetensorsWriter w = every_dtype_writer();
  std::vector<uint8_t> img = w.serialize();
  ParsedSafetensors p = parse_safetensors(img.data(), img.size(), "mem");
  EXPECT_EQ((8 + p.header_size) % 8, 0u);
  ASSERT_EQ(p.metadata.size(), 2u);
  EXPECT_EQ(p.metadata[0], (std::pair<std::string, std::string>{"format", "pt"}));
  EXPECT_EQ(p.metadata[1].second, "every dtype, \"quoted\" and \\ and \u00e9");
  ASSERT_EQ(p.tensors.size(), std::size(kAll));
  uint64_t offset = 0;
  uint8_t seed = 1;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorInfo& t = p.tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, "t." + std::string(dtype_name(kAll[i])));
    EXPECT_EQ(t.dtype, kAll[i]);
    EXPECT_EQ(t.shape, (seed % 2) ? std::vector<int64_t>({2, 3}) : std::vector<int64_t>({3}));
    EXPECT_EQ(t.begin, offset);  // back to back, in the order added
    EXPECT_EQ(t.nbytes(), static_cast<uint64_t>(t.n_elements()) * dtype_size(t.dtype));
    EXPECT_EQ(t.data, img.data() + 8 + p.header_size + t.begin);
    std::vector<uint8_t> want = pattern(t.nbytes(), seed++);
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size()), 0);
    offset = t.end;
  }
  EXPECT_EQ(8 + p.header_size + offset, img.size());

  // Serializing what was parsed gives the same bytes.
  SafetensorsWriter again;
  for (const auto& [k, v] : p.metadata) again.set_metadata(k, v);
  for (const auto& t : p.tensors) again.add_tensor(t.name, t.dtype, t.shape, t.data, t.nbytes());
  EXPECT_EQ(again.serialize(), img);
}

TEST(Safetensors, HeaderIsCompactJsonInInsertionOrderPaddedWithSpaces) {
  SafetensorsWriter w;
  const float a[2] = {1.0f, 2.0f};
  const uint16_t b[3] = {1, 2, 3};
  w.add_tensor("z.first", DType::F32, {2}, a, sizeof a);
  w.add_tensor("a.second", DType::BF16, {1, 3}, b, sizeof b);
  w.set_metadata("format", "pt");  // set last, written first
  std::vector<uint8_t> img = w.serialize();
  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"z.first\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"a.second\":{\"dtype\":\"BF16\",\"shape\":[1,3],\"data_offsets\":[8,14]}}";
  std::string h = header_of(img);
  ASSERT_EQ(h.size() % 8, 0u);
  ASSERT_LT(h.size() - json.size(), 8u);
  EXPECT_EQ(h.substr(0, json.size()), json);
  EXPECT_EQ(h.substr(json.size()), std::string(h.size() - json.size(), ' '));
  EXPECT_EQ(img.size(), 8 + h.size() + 14);  // no padding between or after tensors
  EXPECT_EQ(std::memcmp(img.data() + 8 + h.size(), a, 8), 0);
  EXPECT_EQ(std::memcmp(img.data() + 8 + h.size() + 8, b, 6), 0);
  // The header is valid JSON with those keys.
  nlohmann::json j = nlohmann::json::parse(h);
  EXPECT_EQ(j["a.second"]["data_offsets"], nlohmann::json({8, 14}));
}

TEST(Safetensors, MetadataReplacesInPlace) {
  SafetensorsWriter w;
  w.set_metadata("a", "1");
  w.set_metadata("b", "2");
  w.set_metadata("a", "3");
  std::vector<uint8_t> img = w.serialize();
  ParsedSafetensors p = parse_safetensors(img.data(), img.size(), "mem");
  ASSERT_EQ(p.metadata.size(), 2u);
  EXPECT_EQ(p.metadata[0], (std::pair<std::string, std::string>{"a", "3"}));
  EXPECT_EQ(p.metadata[1], (std::pair<std::string, std::string>{"b", "2"}));
  EXPECT_TRUE(p.tensors.empty());
}

TEST(Safetensors, ZeroSizedAndScalarTensors) {
  SafetensorsWriter w;
  const float one = 1.5f;
  w.add_tensor("empty", DType::F32, {0, 4}, nullptr, 0);
  w.add_tensor("scalar", DType::F32, {}, &one, 4);
  w.add_tensor("empty.last", DType::I64, {3, 0}, nullptr, 0);
  std::vector<uint8_t> img = w.serialize();
  ParsedSafetensors p = parse_safetensors(img.data(), img.size(), "mem");
  ASSERT_EQ(p.tensors.size(), 3u);
  EXPECT_EQ(p.tensors[0].begin, 0u);
  EXPECT_EQ(p.tensors[0].end, 0u);
  EXPECT_EQ(p.tensors[0].n_elements(), 0);
  EXPECT_EQ(p.tensors[1].shape, std::vector<int64_t>{});
  EXPECT_EQ(p.tensors[1].n_elements(), 1);
  EXPECT_EQ(p.tensors[1].begin, 0u);
  EXPECT_EQ(p.tensors[1].end, 4u);
  float f = 0;
  std::memcpy(&f, p.tensors[1].data, 4);
  EXPECT_EQ(f, 1.5f);
  EXPECT_EQ(p.tensors[2].begin, 4u);  // at the very end of the data section
  EXPECT_EQ(p.tensors[2].end, 4u);
  EXPECT_EQ(p.tensors[2].data, img.data() + img.size());
}

TEST(Safetensors, EmptyFile) {
  SafetensorsWriter w;
  std::vector<uint8_t> img = w.serialize();
  ASSERT_EQ(img.size(), 16u);
  EXPECT_EQ(header_of(img), "{}      ");
  ParsedSafetensors p = parse_safetensors(img.data(), img.size(), "mem");
  EXPECT_EQ(p.header_size, 8u);
  EXPECT_TRUE(p.tensors.empty());
  EXPECT_TRUE(p.metadata.empty());

  // "{}" without padding, no data: the smallest valid file.
  std::vector<uint8_t> tiny = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  EXPECT_TRUE(parse_safetensors(tiny.data(), tiny.size(), "tiny").tensors.empty());

  const std::string path = fresh_dir("empty") + "/empty.safetensors";
  w.write(path);
  SafetensorsFile f(path);
  EXPECT_EQ(f.file_size(), 16u);
  EXPECT_TRUE(f.tensors().empty());
}

TEST(Safetensors, WriteThenOpenFile) {
  const std::string dir = fresh_dir("write");
  const std::string path = dir + "/model.safetensors";
  SafetensorsWriter w = every_dtype_writer();
  w.write(path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::string bytes;
  ASSERT_TRUE(test_util::read_file(path, bytes));
  std::vector<uint8_t> img = w.serialize();
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.end()), img);

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.file_size(), img.size());
  EXPECT_EQ(f.metadata().at(0).second, "pt");
  ASSERT_EQ(f.tensors().size(), std::size(kAll));
  const TensorInfo& t = f.tensor("t.BF16");
  EXPECT_EQ(t.dtype, DType::BF16);
  EXPECT_EQ(f.find("t.BF16"), &t);
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_EQ(error_of([&] { f.tensor("nope"); }), path + ": missing tensor 'nope'");

  // Written over: the rename replaces the old file.
  SafetensorsWriter small;
  small.add_tensor_copy("x", DType::U8, {1}, {7});
  small.write(path);
  EXPECT_EQ(SafetensorsFile(path).tensors().size(), 1u);
}

TEST(Safetensors, WriteErrorsNameThePath) {
  const std::string path = fresh_dir("write-err") + "/no/such/folder/m.safetensors";
  SafetensorsWriter w;
  EXPECT_THAT(error_of([&] { w.write(path); }), HasSubstr(path + ": cannot create " + path));
  EXPECT_THAT(error_of([&] { SafetensorsFile f(path); }), HasSubstr(path + ": cannot open"));
}

TEST(Safetensors, WriterRefusesWhatTheReaderWould) {
  SafetensorsWriter w;
  const uint8_t bytes[16] = {};
  w.add_tensor("a", DType::F32, {2}, bytes, 8);
  EXPECT_THAT(error_of([&] { w.add_tensor("a", DType::F32, {2}, bytes, 8); }),
              HasSubstr("duplicate tensor 'a'"));
  EXPECT_THAT(error_of([&] { w.add_tensor("", DType::F32, {2}, bytes, 8); }),
              HasSubstr("empty tensor name"));
  EXPECT_THAT(error_of([&] { w.add_tensor("__metadata__", DType::F32, {2}, bytes, 8); }),
              HasSubstr("'__metadata__'"));
  EXPECT_THAT(error_of([&] { w.add_tensor("b", DType::F32, {3}, bytes, 8); }),
              HasSubstr("tensor 'b': 8 bytes given, expected 12 for shape [3] of F32"));
  EXPECT_THAT(error_of([&] { w.add_tensor("b", DType::F32, {-1}, bytes, 0); }),
              HasSubstr("shape[0] = -1"));
  EXPECT_THAT(error_of([&] {
                w.add_tensor("b", DType::U8, {1, 1, 1, 1, 1, 1, 1, 1, 1}, bytes, 1);
              }),
              HasSubstr("9 dimensions, at most 8"));
  EXPECT_THAT(error_of([&] { w.add_tensor("b", DType::F32, {2}, nullptr, 8); }),
              HasSubstr("null data"));
  EXPECT_THAT(error_of([&] {
                w.add_tensor("b", DType::F64, {int64_t{1} << 62, 4}, bytes, 0);
              }),
              HasSubstr("element count of shape"));
  EXPECT_THAT(error_of([&] { w.add_tensor("bad\xff", DType::F32, {2}, bytes, 8); }),
              HasSubstr("is not valid UTF-8"));
  EXPECT_THAT(error_of([&] { w.set_metadata("k", "\xc3"); }), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(error_of([&] { w.write_sharded(fresh_dir("zero"), 0); }),
              HasSubstr("max_shard_bytes must be > 0"));
  // None of the refused calls left a trace.
  std::vector<uint8_t> img = w.serialize();
  EXPECT_EQ(parse_safetensors(img.data(), img.size(), "mem").tensors.size(), 1u);
}

// A writer with tensors of 40, 24, 100, 8 and 0 bytes.
SafetensorsWriter shardable_writer() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add_tensor_copy("model.embed_tokens.weight", DType::F32, {2, 5}, pattern(40, 1));
  w.add_tensor_copy("model.layers.0.w", DType::BF16, {3, 4}, pattern(24, 2));
  w.add_tensor_copy("model.layers.1.w", DType::U8, {100}, pattern(100, 3));
  w.add_tensor_copy("model.norm.weight", DType::F64, {1}, pattern(8, 4));
  w.add_tensor_copy("model.empty", DType::I32, {0}, {});
  return w;
}

void expect_same_tensors(const SafetensorsCheckpoint& a, const SafetensorsCheckpoint& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const TensorInfo& x = *a.tensors()[i];
    const TensorInfo& y = *b.tensors()[i];
    SCOPED_TRACE(x.name);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.shape, y.shape);
    ASSERT_EQ(x.nbytes(), y.nbytes());
    if (x.nbytes()) {
      EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes()), 0);
    }
  }
}

TEST(Safetensors, ShardedCheckpointEqualsTheSingleFile) {
  SafetensorsWriter w = shardable_writer();
  const std::string single = fresh_dir("single") + "/model.safetensors";
  w.write(single);
  const std::string dir = fresh_dir("sharded");
  // 64 bytes per shard: [40, 24] [100] [8, 0].
  std::vector<std::string> names = w.write_sharded(dir, 64);
  ASSERT_EQ(names, (std::vector<std::string>{"model-00001-of-00003.safetensors",
                                             "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors"}));
  for (const auto& n : names) EXPECT_FALSE(fs::exists(dir + "/" + n + ".tmp"));

  std::string index_text;
  ASSERT_TRUE(test_util::read_file(dir + "/model.safetensors.index.json", index_text));
  nlohmann::json index = nlohmann::json::parse(index_text);
  EXPECT_EQ(index["metadata"]["total_size"], 172);
  EXPECT_EQ(index["weight_map"]["model.layers.1.w"], names[1]);
  EXPECT_EQ(index["weight_map"]["model.empty"], names[2]);
  EXPECT_EQ(index["weight_map"].size(), 5u);

  SafetensorsCheckpoint sharded = SafetensorsCheckpoint::open(dir);
  SafetensorsCheckpoint one = SafetensorsCheckpoint::open(single);
  EXPECT_EQ(sharded.path(), dir);
  ASSERT_EQ(sharded.shards().size(), 3u);
  EXPECT_EQ(one.shards().size(), 1u);
  expect_same_tensors(sharded, one);
  EXPECT_EQ(sharded.shard_of("model.layers.1.w").path(), (fs::path(dir) / names[1]).string());
  EXPECT_EQ(sharded.shard_of("model.norm.weight").path(), (fs::path(dir) / names[2]).string());
  uint64_t sizes = 0;
  for (const auto& n : names) sizes += fs::file_size(fs::path(dir) / n);
  EXPECT_EQ(sharded.total_bytes(), sizes);
  EXPECT_EQ(one.total_bytes(), fs::file_size(single));
  for (const auto& s : sharded.shards()) EXPECT_EQ(s->metadata().at(0).second, "pt");
  EXPECT_EQ(sharded.find("nope"), nullptr);
  EXPECT_EQ(&sharded.tensor("model.empty"), sharded.find("model.empty"));
  EXPECT_EQ(error_of([&] { sharded.tensor("nope"); }), dir + ": missing tensor 'nope'");
  EXPECT_EQ(error_of([&] { sharded.shard_of("nope"); }), dir + ": missing tensor 'nope'");
}

TEST(Safetensors, TensorLargerThanTheShardLimitGetsItsOwnShard) {
  SafetensorsWriter w = shardable_writer();
  const std::string dir = fresh_dir("big-tensor");
  // 30 bytes: [40] [24] [100] [8, 0].
  EXPECT_EQ(w.write_sharded(dir, 30).size(), 4u);
  SafetensorsCheckpoint ck = SafetensorsCheckpoint::open(dir);
  EXPECT_EQ(ck.shards()[0]->tensors().size(), 1u);
  EXPECT_EQ(ck.shards()[3]->tensors().size(), 2u);
  // One big shard: a single file with all of them.
  const std::string dir1 = fresh_dir("one-shard");
  EXPECT_EQ(w.write_sharded(dir1, 1 << 20),
            std::vector<std::string>{"model-00001-of-00001.safetensors"});
  expect_same_tensors(SafetensorsCheckpoint::open(dir1), ck);
  // No tensors at all: one empty shard.
  const std::string dir0 = fresh_dir("no-tensors");
  EXPECT_EQ(SafetensorsWriter().write_sharded(dir0, 8).size(), 1u);
  EXPECT_TRUE(SafetensorsCheckpoint::open(dir0).tensors().empty());
  // write_sharded creates the folder.
  const std::string nested = fresh_dir("nested") + "/a/b";
  EXPECT_EQ(w.write_sharded(nested, 1 << 20).size(), 1u);
  EXPECT_EQ(SafetensorsCheckpoint::open(nested).tensors().size(), 5u);
}

TEST(Safetensors, FolderWithModelSafetensors) {
  const std::string dir = fresh_dir("folder-single");
  SafetensorsWriter w = shardable_writer();
  w.write(dir + "/model.safetensors");
  SafetensorsCheckpoint ck = SafetensorsCheckpoint::open(dir);
  ASSERT_EQ(ck.shards().size(), 1u);
  EXPECT_EQ(ck.shards()[0]->path(), (fs::path(dir) / "model.safetensors").string());
  EXPECT_EQ(ck.tensors().size(), 5u);
  EXPECT_EQ(ck.tensors()[0]->name, "model.embed_tokens.weight");  // header order
}

TEST(Safetensors, FolderWithBothPrefersTheIndex) {
  const std::string dir = fresh_dir("folder-both");
  shardable_writer().write_sharded(dir, 64);
  SafetensorsWriter other;
  other.add_tensor_copy("stale", DType::U8, {1}, {1});
  other.write(dir + "/model.safetensors");
  SafetensorsCheckpoint ck = SafetensorsCheckpoint::open(dir);
  EXPECT_EQ(ck.shards().size(), 3u);
  EXPECT_EQ(ck.find("stale"), nullptr);
}

TEST(Safetensors, OpenErrorsSayWhatWasLookedFor) {
  const std::string dir = fresh_dir("folder-none");
  EXPECT_EQ(error_of([&] { SafetensorsCheckpoint::open(dir); }),
            dir +
                ": no safetensors weights in the folder: expected model.safetensors.index.json or "
                "model.safetensors");
  const std::string missing = dir + "/absent.safetensors";
  EXPECT_THAT(error_of([&] { SafetensorsCheckpoint::open(missing); }),
              HasSubstr(missing + ": no such file or folder"));
  // A file that is not safetensors names itself.
  std::ofstream(dir + "/junk.safetensors") << "junk";
  EXPECT_THAT(error_of([&] { SafetensorsCheckpoint::open(dir + "/junk.safetensors"); }),
              HasSubstr(dir + "/junk.safetensors: file is 4 bytes"));
}

TEST(Safetensors, TinyStories656kOpens) {
  const std::string dir = test_util::models_dir() + "/tinystories-656k";
  const std::string path = dir + "/model.safetensors";
  if (!fs::exists(path)) {
    GTEST_SKIP() << "no " << path;
  }
  SafetensorsFile f(path);
  // 21 keys in the header: 20 tensors and __metadata__.
  EXPECT_EQ(f.tensors().size(), 20u);
  const TensorInfo& lm = f.tensor("lm_head.weight");
  EXPECT_EQ(lm.dtype, DType::F32);
  EXPECT_EQ(lm.shape, (std::vector<int64_t>{2048, 128}));
  ASSERT_EQ(lm.nbytes(), 2048u * 128u * 4u);
  bool has_format = false;
  for (const auto& [k, v] : f.metadata()) has_format |= k == "format" && v == "pt";
  EXPECT_TRUE(has_format);
  size_t nonzero = 0;
  for (int64_t i = 0; i < lm.n_elements(); i += 97) {
    float x;
    std::memcpy(&x, lm.data + i * 4, 4);
    ASSERT_TRUE(std::isfinite(x)) << i;
    nonzero += x != 0.0f;
  }
  EXPECT_GT(nonzero, 100u);
  for (const TensorInfo& t : f.tensors()) {
    if (t.dtype != DType::F32) continue;
    float first, last;
    std::memcpy(&first, t.data, 4);
    std::memcpy(&last, t.data + t.nbytes() - 4, 4);
    EXPECT_TRUE(std::isfinite(first) && std::isfinite(last)) << t.name;
  }
  // The folder opens as a checkpoint too, with the same tensors.
  SafetensorsCheckpoint ck = SafetensorsCheckpoint::open(dir);
  EXPECT_EQ(ck.tensors().size(), 20u);
  EXPECT_EQ(ck.tensor("lm_head.weight").shape, lm.shape);
  // Written back by our writer and read again: the same tensors.
  SafetensorsWriter w;
  for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
  for (const TensorInfo& t : f.tensors())
    w.add_tensor(t.name, t.dtype, t.shape, t.data, t.nbytes());
  const std::string copy = fresh_dir("tinystories-copy") + "/model.safetensors";
  w.write(copy);
  expect_same_tensors(SafetensorsCheckpoint::open(copy), SafetensorsCheckpoint::open(path));
}

}  // namespace
}  // namespace kvasir::safetensors
