// util/sha256.h: the FIPS 180-2 vectors, a file against the sha256sum tool, a Hugging Face
// folder's digest reproduced with sha256sum exactly as the header documents it, and errors that
// name the file.
#include "kvasir/util/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "kvasir/util/error.h"
#include "test_util/files.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

// stdout of a shell command (the first line, without its newline); "" when it fails.
std::string shell_line(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  if (::pclose(p) != 0) return "";
  if (auto nl = out.find('\n'); nl != std::string::npos) out.resize(nl);
  return out;
}

bool have_sha256sum() {
  return !shell_line("command -v sha256sum").empty();
}

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(test_util::temp_dir("kvasir-sha256")) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // FIPS 180-2's long vector: one million 'a'.
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileMatchesSha256sum) {
  if (!have_sha256sum()) GTEST_SKIP() << "sha256sum not installed";
  const fs::path d = fresh_dir("file");
  // Larger than one 4 MiB read chunk and not a multiple of it, so the streaming loop's second
  // read and short tail are exercised.
  std::string bytes((size_t{9} << 20) + 12345, '\0');
  uint32_t x = 12345;
  for (char& c : bytes) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  const fs::path f = d / "blob.bin";
  write(f, bytes);
  const std::string want = shell_line("sha256sum '" + f.string() + "' | cut -d' ' -f1");
  ASSERT_EQ(want.size(), 64u);
  EXPECT_EQ(sha256_file(f.string()), want);
  EXPECT_EQ(sha256_model_path(f.string()), want);  // a file path: the file's hash
  const fs::path empty = d / "empty.gguf";
  write(empty, "");
  EXPECT_EQ(sha256_file(empty.string()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, FolderDigestIsTheDocumentedSha256sumManifest) {
  if (!have_sha256sum()) GTEST_SKIP() << "sha256sum not installed";
  const fs::path d = fresh_dir("hf");
  write(d / "config.json", "{\"model_type\": \"llama\"}\n");
  write(d / "model-00002-of-00002.safetensors", std::string(1000, 'b'));
  write(d / "model-00001-of-00002.safetensors", std::string(3000, 'a'));
  write(d / "tokenizer.json", "{}");
  write(d / "tokenizer.model", "spm");
  write(d / "chat_template.jinja", "{{ messages }}");
  write(d / "Zeta.json", "{}");  // upper case sorts before lower case in byte order
  // Not counted: other suffixes, hidden files, subfolders.
  write(d / "README.md", "readme");
  write(d / ".hidden.json", "{}");
  fs::create_directories(d / "sub");
  write(d / "sub" / "x.json", "{}");

  // The header's recipe, verbatim.
  const std::string want = shell_line(
      "cd '" + d.string() +
      "' && ls -1 | grep -E '\\.(safetensors|json|jinja)$|^tokenizer\\.model$' | LC_ALL=C sort | "
      "xargs -d '\\n' sha256sum -- | sha256sum | cut -d' ' -f1");
  ASSERT_EQ(want.size(), 64u);
  const std::string got = sha256_model_path(d.string());
  EXPECT_EQ(got, want);

  // Files outside the definition do not change the digest; one that counts does.
  write(d / "README.md", "changed");
  write(d / "sub" / "x.json", "changed");
  EXPECT_EQ(sha256_model_path(d.string()), got);
  write(d / "tokenizer.model", "spm2");
  EXPECT_NE(sha256_model_path(d.string()), got);
}

TEST(Sha256, FolderDigestFromKnownLines) {
  // Independent of any tool: the manifest of one file "a.json" holding "abc" is one sha256sum
  // line, hashed again.
  const fs::path d = fresh_dir("one");
  write(d / "a.json", "abc");
  const std::string line =
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a.json\n";
  EXPECT_EQ(sha256_model_path(d.string()), sha256_hex(line));
}

TEST(Sha256, ErrorsNameTheFile) {
  const fs::path d = fresh_dir("errors");
  const std::string missing = (d / "nope.gguf").string();
  try {
    sha256_file(missing);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  try {
    sha256_model_path(missing);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
  }
  write(d / "notes.txt", "x");  // a folder with nothing that counts
  try {
    sha256_model_path(d.string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(d.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no model files"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sha256_file(d.string()), Error);  // a folder is not a file
}

TEST(Sha256, DigestShape) {
  EXPECT_TRUE(is_sha256_hex(sha256_hex("x")));
  EXPECT_TRUE(is_sha256_hex(std::string(64, 'A')));
  EXPECT_FALSE(is_sha256_hex(std::string(63, 'a')));
  EXPECT_FALSE(is_sha256_hex(std::string(63, 'a') + "g"));
}

}  // namespace
}  // namespace kvasir
