// Our quantizers and dequantizers against ggml's own, on the rows of quant_test_inputs.h:
// tests/fixtures/ggml-quants/manifest.txt holds, per format and variant (reference: no importance;
// imatrix: quant_test_importance), FNV-1a hashes of the bytes ggml's quantize_<type> wrote and of
// ggml's dequantization of them (made by make.sh there, from the pinned llama.cpp's libggml-base).
// Equal quantized hashes mean byte-identical blocks, so our dequantizer then also decodes blocks
// written by llama.cpp; for the small set the bytes themselves are in <type>-<variant>.bin, which
// is also decoded directly (and a mismatch is reported at its first differing block).
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/quantize.h"
#include "tensor/quant_test_inputs.h"

namespace kvasir {
namespace {

struct Entry {
  std::string type, variant;
  int64_t rows = 0, cols = 0;
  uint64_t seed = 0, fnv_q = 0, fnv_deq = 0;
};

std::string fixture_dir() {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/ggml-quants";
}

std::vector<Entry> manifest() {
  std::ifstream f(fixture_dir() + "/manifest.txt");
  std::vector<Entry> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    Entry e;
    std::string q, d;
    is >> e.type >> e.variant >> e.rows >> e.cols >> e.seed >> q >> d;
    e.fnv_q = std::stoull(q, nullptr, 16);
    e.fnv_deq = std::stoull(d, nullptr, 16);
    out.push_back(e);
  }
  return out;
}

uint64_t fnv1a(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

DType type_of(const std::string& ggml_name) {
  std::string lower = ggml_name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto t = dtype_from_name(lower);
  if (!t) ADD_FAILURE() << "unknown type " << ggml_name;
  return t.value_or(DType::F32);
}

class GgmlQuants : public ::testing::TestWithParam<std::string> {};

TEST(GgmlQuantsManifest, CoversEveryFormat) {
  const auto m = manifest();
  ASSERT_FALSE(m.empty()) << "no manifest at " << fixture_dir();
  for (const char* t : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K",
                        "q6_K", "iq4_nl", "iq4_xs"}) {
    int n = 0;
    for (const auto& e : m) n += e.type == t;
    EXPECT_EQ(n, 4) << t;
  }
}

TEST_P(GgmlQuants, QuantizeAndDequantizeMatchGgml) {
  const std::string type_name = GetParam();
  const DType t = type_of(type_name);
  for (const auto& e : manifest()) {
    if (e.type != type_name) continue;
    SCOPED_TRACE(e.type + " " + e.variant + " " + std::to_string(e.rows) + "x" +
                 std::to_string(e.cols));
    const auto x = test::quant_test_matrix(e.seed, e.rows, e.cols);
    const auto w = test::quant_test_importance(e.seed, e.cols);
    const size_t rb = row_bytes(t, e.cols);
    std::vector<uint8_t> q(rb * static_cast<size_t>(e.rows));
    quantize_rows(t, x.data(), q.data(), e.rows, e.cols,
                  e.variant == "imatrix" ? w.data() : nullptr);
    EXPECT_EQ(fnv1a(q.data(), q.size()), e.fnv_q) << "quantized bytes differ from ggml's";

    // The bytes ggml wrote (small set) or, when ours are identical, ours: decode and compare.
    std::vector<uint8_t> theirs = q;
    if (e.rows == 8) {
      std::string lower = type_name;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::ifstream g(fixture_dir() + "/" + lower + "-" + e.variant + ".bin", std::ios::binary);
      theirs.assign(std::istreambuf_iterator<char>(g), {});
      ASSERT_EQ(theirs.size(), q.size());
      const size_t bb = static_cast<size_t>(dtype_info(t).block_bytes);
      for (size_t i = 0; i < q.size(); i += bb) {
        if (std::memcmp(q.data() + i, theirs.data() + i, bb) != 0) {
          ADD_FAILURE() << "first differing block: #" << i / bb << " (row " << i / rb << ")";
          break;
        }
      }
    }
    std::vector<float> y(x.size());
    for (int64_t r = 0; r < e.rows; ++r)
      dequantize_row(t, theirs.data() + static_cast<size_t>(r) * rb, y.data() + r * e.cols, e.cols);
    EXPECT_EQ(fnv1a(y.data(), y.size() * sizeof(float)), e.fnv_deq)
        << "dequantization differs from ggml's";
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, GgmlQuants,
                         ::testing::Values("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K",
                                           "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvasir
