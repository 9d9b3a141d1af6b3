// Replays every file of the committed fuzz corpus (fuzz/corpus/safetensors) through
// parse_safetensors: each must parse or throw kvasir::Error, never crash. Seeds named valid_*
// must parse and invalid_* must be rejected with a message naming the file; inputs the fuzzer
// found (other names) may do either. What parses must survive the writer round trip as in
// fuzz/safetensors_fuzz.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvasir/format/safetensors.h"
#include "kvasir/util/error.h"

namespace kvasir::safetensors {
namespace {

SafetensorsWriter writer_for(const ParsedSafetensors& p) {
  SafetensorsWriter w;
  for (const auto& [k, v] : p.metadata) w.set_metadata(k, v);
  for (const auto& t : p.tensors) w.add_tensor(t.name, t.dtype, t.shape, t.data, t.nbytes());
  return w;
}

TEST(SafetensorsFuzzCorpus, EveryFileParsesOrThrowsError) {
  std::filesystem::path dir = KVASIR_SOURCE_DIR "/fuzz/corpus/safetensors";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  size_t files = 0, valid = 0, invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in),
                               std::istreambuf_iterator<char>()};
    EXPECT_LT(bytes.size(), 4096u);
    ++files;
    std::string error;
    try {
      ParsedSafetensors p = parse_safetensors(bytes.data(), bytes.size(), name);
      for (const auto& t : p.tensors) {
        EXPECT_GE(t.data, bytes.data());
        EXPECT_LE(t.data + t.nbytes(), bytes.data() + bytes.size());
      }
      std::vector<uint8_t> once = writer_for(p).serialize();
      ParsedSafetensors q = parse_safetensors(once.data(), once.size(), "round-trip");
      EXPECT_EQ(q.metadata, p.metadata);
      ASSERT_EQ(q.tensors.size(), p.tensors.size());
      for (size_t i = 0; i < p.tensors.size(); ++i) {
        EXPECT_EQ(q.tensors[i].name, p.tensors[i].name);
        EXPECT_EQ(q.tensors[i].shape, p.tensors[i].shape);
        ASSERT_EQ(q.tensors[i].nbytes(), p.tensors[i].nbytes());
        if (p.tensors[i].nbytes()) {
          EXPECT_EQ(std::memcmp(q.tensors[i].data, p.tensors[i].data, p.tensors[i].nbytes()), 0);
        }
      }
      EXPECT_EQ(writer_for(q).serialize(), once);
    } catch (const Error& e) {
      error = e.what();
    }
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_EQ(error, "");
      ++valid;
    } else if (name.rfind("invalid_", 0) == 0) {
      EXPECT_EQ(error.rfind(name + ": ", 0), 0u) << "expected an error naming the file: " << error;
      ++invalid;
    }
  }
  EXPECT_GE(valid, 6u);
  EXPECT_GE(invalid, 15u);
  EXPECT_GE(files, valid + invalid);
}

}  // namespace
}  // namespace kvasir::safetensors
