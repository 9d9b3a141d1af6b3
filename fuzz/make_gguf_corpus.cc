// Writes the seed corpus for gguf_fuzz: a few tiny valid and invalid GGUF images (each under
// 4 KiB) into the directory given as the only argument (normally fuzz/corpus/gguf).
// Files named valid_* must parse, invalid_* must be rejected; tests/format replays them all.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvasir/format/gguf.h"

namespace {

using kvasir::DType;
using kvasir::gguf::GGUFWriter;
using kvasir::gguf::Value;
using kvasir::gguf::ValueType;

// Little-endian fields for the hand-made invalid images.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  Bytes& put(T x) {
    size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &x, sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put<uint32_t>(3).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  Bytes& tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t off) {
    str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) put(d);
    return put(type).put(off);
  }
  Bytes& pad_zeros(size_t alignment, size_t extra) {
    while (b.size() % alignment) b.push_back(0);
    b.insert(b.end(), extra, 0);
    return *this;
  }
};

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<uint8_t> every_type() {
  GGUFWriter w;
  w.set("general.architecture", Value::str("llama"));
  w.set("u8", Value::u8(1));
  w.set("i8", Value::i8(-1));
  w.set("u16", Value::u16(2));
  w.set("i16", Value::i16(-2));
  w.set("u32", Value::u32(3));
  w.set("i32", Value::i32(-3));
  w.set("f32", Value::f32(0.5f));
  w.set("bool", Value::boolean(true));
  w.set("u64", Value::u64(4));
  w.set("i64", Value::i64(-4));
  w.set("f64", Value::f64(0.25));
  w.set("strs", Value::string_array({"<unk>", "a", ""}));
  w.set("bools", Value::array(ValueType::BOOL, {Value::boolean(false), Value::boolean(true)}));
  w.set("nested", Value::array(ValueType::ARRAY,
                               {Value::i32_array({1, 2}), Value::array(ValueType::ARRAY, {})}));
  w.add_tensor_copy("w.f32", DType::F32, {4, 2}, bytes_of(32, 1));
  w.add_tensor_copy("w.q8", DType::Q8_0, {32}, bytes_of(34, 2));
  return w.serialize();
}

std::vector<uint8_t> vocab_only() {
  GGUFWriter w;
  w.set("tokenizer.ggml.model", Value::str("llama"));
  w.set("tokenizer.ggml.tokens", Value::string_array({"<unk>", "<s>", "</s>",
                                                      "\xe2\x96\x81"
                                                      "a"}));
  w.set("tokenizer.ggml.scores", Value::f32_array({0, 0, 0, -1.5f}));
  w.set("tokenizer.ggml.token_type", Value::i32_array({2, 3, 3, 1}));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  return w.serialize();
}

std::vector<uint8_t> aligned_64() {
  GGUFWriter w;
  w.set("general.name", Value::str("a64"));
  w.add_tensor_copy("h", DType::F16, {2, 1, 3, 1}, bytes_of(12, 3));
  w.add_tensor_copy("i", DType::I8, {5}, bytes_of(5, 4));
  return w.serialize(64);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  auto save = [&](const std::string& name, const std::vector<uint8_t>& b) {
    if (b.size() >= 4096) {
      std::fprintf(stderr, "%s is %zu bytes, over the 4 KiB seed limit\n", name.c_str(), b.size());
      std::exit(1);
    }
    std::ofstream((dir / name).string(), std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  };

  std::vector<uint8_t> all = every_type();
  save("valid_every_type", all);
  save("valid_vocab_only", vocab_only());
  save("valid_align64", aligned_64());
  std::vector<uint8_t> v2 = vocab_only();
  v2[4] = 2;  // version 2 has the same layout
  save("valid_v2", v2);
  Bytes empty;
  save("valid_empty", empty.header(0, 0).b);

  save("invalid_truncated", std::vector<uint8_t>(all.begin(), all.begin() + 200));
  std::vector<uint8_t> magic = all;
  magic[3] = 'X';
  save("invalid_magic", magic);
  Bytes v1;
  v1.header(0, 0).b[4] = 1;
  save("invalid_version1", v1.b);
  Bytes overlap;
  overlap.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad_zeros(32, 64);
  save("invalid_overlap", overlap.b);
  Bytes dtype;
  dtype.header(1, 0).tensor("a", {8}, 4, 0).pad_zeros(32, 32);
  save("invalid_unknown_dtype", dtype.b);
  Bytes block;
  block.header(1, 0).tensor("a", {33}, 8, 0).pad_zeros(32, 64);
  save("invalid_block_size", block.b);
  Bytes deep;
  deep.header(0, 1).str("deep").put<uint32_t>(9);
  for (int i = 0; i < 9; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
  deep.put<uint32_t>(0).put<uint64_t>(0);
  save("invalid_deep_nesting", deep.b);
  Bytes align;
  align.header(0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(48);
  save("invalid_alignment", align.b);
  Bytes count;
  count.header(0, 1).str("a").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1ull << 61);
  save("invalid_array_length", count.b);
  return 0;
}
