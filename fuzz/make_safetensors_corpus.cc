// Writes the seed corpus for safetensors_fuzz: a few tiny valid and invalid safetensors images
// (each under 4 KiB) into the directory given as the only argument (normally
// fuzz/corpus/safetensors). Files named valid_* must parse, invalid_* must be rejected;
// tests/format/safetensors_fuzz_corpus_test.cc replays them all.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvasir/format/safetensors.h"

namespace {

using kvasir::safetensors::DType;
using kvasir::safetensors::SafetensorsWriter;

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// A hand-made image: the 8-byte size of `header`, `header`, then `data_bytes` bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes = 0) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0x3c);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  if (!header.empty()) std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::vector<uint8_t> every_dtype() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  const DType all[] = {DType::BOOL, DType::U8,   DType::I8,  DType::U16,     DType::I16,
                       DType::F16,  DType::BF16, DType::U32, DType::I32,     DType::F32,
                       DType::U64,  DType::I64,  DType::F64, DType::F8_E4M3, DType::F8_E5M2};
  uint8_t seed = 1;
  for (DType t : all) {
    w.add_tensor_copy(std::string("t.") + std::string(kvasir::safetensors::dtype_name(t)), t,
                      {2, 1}, bytes_of(2 * kvasir::safetensors::dtype_size(t), seed++));
  }
  return w.serialize();
}

// Tensor names and shapes of a tiny llama checkpoint, as Hugging Face writes them.
std::vector<uint8_t> tiny_llama() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add_tensor_copy("lm_head.weight", DType::F32, {8, 4}, bytes_of(128, 1));
  w.add_tensor_copy("model.embed_tokens.weight", DType::BF16, {8, 4}, bytes_of(64, 2));
  w.add_tensor_copy("model.layers.0.input_layernorm.weight", DType::F16, {4}, bytes_of(8, 3));
  w.add_tensor_copy("model.layers.0.self_attn.q_proj.weight", DType::BF16, {4, 4}, bytes_of(32, 4));
  w.add_tensor_copy("model.norm.weight", DType::F32, {4}, bytes_of(16, 5));
  return w.serialize();
}

std::vector<uint8_t> zero_sized() {
  SafetensorsWriter w;
  w.add_tensor_copy("empty", DType::F32, {0, 3}, {});
  w.add_tensor_copy("scalar", DType::I64, {}, bytes_of(8, 9));
  w.add_tensor_copy("empty.last", DType::U8, {4, 0, 2}, {});
  return w.serialize();
}

std::string f32(const std::string& shape, const std::string& offsets) {
  return "{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
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

  std::vector<uint8_t> all = every_dtype();
  save("valid_every_dtype", all);
  save("valid_tiny_llama", tiny_llama());
  save("valid_zero_sized", zero_sized());
  save("valid_empty", SafetensorsWriter().serialize());
  save("valid_empty_unpadded", image("{}"));
  {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    w.set_metadata("escapes", "\"\\/\b\f\n\r\t \u00e9 \U0001F600");
    save("valid_metadata_only", w.serialize());
  }
  // Written by hand: keys and tensors in any order, whitespace, escapes, -0, trailing newline.
  save(
      "valid_hand_written",
      image("{ \"b\" : {\"shape\":[ 2 ],\"data_offsets\":[8,16],\"dtype\":\"F32\"},\n"
            "  \"a\\u0062c\": {\"data_offsets\": [8, 8], \"dtype\": \"U8\", \"shape\": [2, -0, 4]},"
            "\t\"a\":{\"dtype\":\"U8\",\"shape\":[2,4],\"data_offsets\":[0,8]}}\r\n",
            16));
  save("valid_out_of_order",
       image("{\"z\":" + f32("[1]", "[8,12]") + ",\"y\":" + f32("[2]", "[0,8]") + "}", 12));

  save("invalid_truncated", std::vector<uint8_t>(all.begin(), all.begin() + 200));
  std::vector<uint8_t> big = all;
  big[7] = 0x01;  // header size above the limit
  save("invalid_header_size", big);
  save("invalid_not_json", image("{\"a\":{\"dtype\":\"F32\","));
  save("invalid_trailing", image("{}  x"));
  save("invalid_nul", image(std::string("{}\0{}", 5)));
  save("invalid_duplicate_tensor",
       image("{\"w\":" + f32("[1]", "[0,4]") + ",\"w\":" + f32("[1]", "[4,8]") + "}", 8));
  save("invalid_duplicate_key", image("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}"));
  save("invalid_unknown_dtype",
       image("{\"w\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1));
  save("invalid_float_dim", image("{\"w\":" + f32("[1.0]", "[0,4]") + "}", 4));
  save("invalid_negative_dim", image("{\"w\":" + f32("[-1]", "[0,0]") + "}"));
  save("invalid_extra_key",
       image("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4));
  save("invalid_size_mismatch", image("{\"w\":" + f32("[3]", "[0,8]") + "}", 8));
  save("invalid_overlap",
       image("{\"a\":" + f32("[2]", "[0,8]") + ",\"b\":" + f32("[2]", "[4,12]") + "}", 12));
  save("invalid_hole",
       image("{\"a\":" + f32("[1]", "[0,4]") + ",\"b\":" + f32("[1]", "[8,12]") + "}", 12));
  save("invalid_trailing_data", image("{\"a\":" + f32("[1]", "[0,4]") + "}", 8));
  save("invalid_past_end", image("{\"a\":" + f32("[4]", "[0,16]") + "}", 8));
  save("invalid_overflow", image("{\"a\":" + f32("[4294967296,4294967296]", "[0,0]") + "}"));
  save("invalid_metadata_value", image("{\"__metadata__\":{\"format\":[\"pt\"]}}"));
  save("invalid_deep_nesting", image("{\"a\":{\"shape\":" + std::string(3000, '[') + "}}"));
  return 0;
}
