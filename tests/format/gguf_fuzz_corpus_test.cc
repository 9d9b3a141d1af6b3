// Replays every file of the committed fuzz corpus (fuzz/corpus/gguf) through parse_gguf: each
// must parse or throw kvasir::Error, never crash. Seeds named valid_* must parse and invalid_*
// must be rejected; inputs the fuzzer found (other names) may do either.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"

namespace kvasir::gguf {
namespace {

TEST(GGUFFuzzCorpus, EveryFileParsesOrThrowsError) {
  std::filesystem::path dir = KVASIR_SOURCE_DIR "/fuzz/corpus/gguf";
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
      ParsedGGUF p = parse_gguf(bytes.data(), bytes.size(), name);
      for (const auto& t : p.tensors) {
        EXPECT_GE(t.data, bytes.data());
        EXPECT_LE(t.data + t.nbytes, bytes.data() + bytes.size());
      }
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
  EXPECT_GE(valid, 4u);
  EXPECT_GE(invalid, 8u);
  EXPECT_GE(files, valid + invalid);
}

}  // namespace
}  // namespace kvasir::gguf
