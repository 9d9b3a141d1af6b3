// Every vocab in models/vocab/ must reproduce llama.cpp's tokenizer test vectors exactly (the
// .inp/.out files: strings split on "\n__ggml_vocab_test__\n", one line of ids per string,
// tokenized with add_special = false, parse_special = false). Vocabs without vectors must load
// and round-trip text.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "kvasir/tokenizer/tokenizer.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> vocab_files() {
  std::vector<std::string> names;
  const fs::path dir = fs::path(test_util::models_dir()) / "vocab";
  if (!fs::is_directory(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".gguf") names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> split_inputs(const std::string& inp) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> parts;
  size_t pos = 0;
  for (size_t hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size()) {
    parts.push_back(inp.substr(pos, hit - pos));
  }
  // What follows the last separator is not a test string (the file ends with the separator).
  return parts;
}

std::vector<std::vector<TokenId>> parse_outputs(const std::string& out) {
  std::vector<std::vector<TokenId>> rows;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<TokenId> row;
    for (TokenId id; ids >> id;) row.push_back(id);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

class VocabFile : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFile, ReproducesVectorsOrRoundTrips) {
  const std::string path = test_util::models_dir() + "/vocab/" + GetParam();
  const Tokenizer tok = Tokenizer::from_file(path);
  ASSERT_GT(tok.n_vocab(), 0);

  std::string inp, out;
  if (test_util::read_file(path + ".inp", inp) && test_util::read_file(path + ".out", out)) {
    const auto inputs = split_inputs(inp);
    const auto expected = parse_outputs(out);
    ASSERT_EQ(inputs.size(), expected.size()) << path;
    ASSERT_GT(inputs.size(), 10u);
    size_t passed = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto got = tok.encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
      EXPECT_EQ(got, expected[i]) << GetParam() << " string " << i << " '" << inputs[i]
                                  << "'\n  got:     " << show(got)
                                  << "\n  expected:" << show(expected[i]);
      passed += got == expected[i];
    }
    std::cout << "[ vectors  ] " << GetParam() << ": " << passed << "/" << inputs.size()
              << " passed\n";
  } else {
    // No vectors: the vocab must load and give text back unchanged.
    const std::string text =
        "Hello world! The quick brown fox jumps over the lazy dog.\n"
        "Numbers 12345 and 3.14, unicode h\xC3\xA9llo w\xC3\xB6rld \xE4\xBD\xA0\xE5\xA5\xBD";
    const auto ids = tok.encode(text, false, false);
    EXPECT_GT(ids.size(), 10u);
    EXPECT_LT(ids.size(), text.size());
    EXPECT_EQ(tok.decode(ids), text) << GetParam();
    std::cout << "[ roundtrip] " << GetParam() << ": " << ids.size() << " tokens\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, VocabFile, ::testing::ValuesIn(vocab_files()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VocabFile);

TEST(VocabFiles, AreAllPresent) {
  // The shared folder ships 12 vocabs; a missing folder must not silently pass.
  EXPECT_EQ(vocab_files().size(), 12u) << "looked in " << test_util::models_dir() << "/vocab";
}

}  // namespace
}  // namespace kvasir
