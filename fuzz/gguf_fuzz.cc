// libFuzzer target for the GGUF reader.
//
// Any input must either parse or throw kvasir::Error; sanitizers catch everything else. When it
// parses, the result must be sane (tensor views inside the input, displayable values) and must
// survive a round trip through GGUFWriter: writing the parsed file and parsing it again gives
// the same bytes when written once more (a fixed point, so NaN payloads do not matter).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"

namespace {

using kvasir::gguf::GGUFWriter;
using kvasir::gguf::ParsedGGUF;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "gguf_fuzz: invariant failed: %s\n", what);
    std::abort();
  }
}

GGUFWriter writer_for(const ParsedGGUF& p) {
  GGUFWriter w;
  for (const auto& [key, v] : p.kv) w.set(key, v);
  for (const auto& t : p.tensors) w.add_tensor(t.name, t.type, t.shape, t.data, t.nbytes);
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ParsedGGUF p;
  try {
    p = kvasir::gguf::parse_gguf(data, size, "fuzz-input");
  } catch (const kvasir::Error&) {
    return 0;
  }

  check(p.alignment != 0 && (p.alignment & (p.alignment - 1)) == 0, "alignment power of two");
  check(p.data_offset % p.alignment == 0, "data section aligned");
  volatile uint8_t sink = 0;
  for (const auto& t : p.tensors) {
    check(t.nbytes > 0 && t.data >= data && t.data + t.nbytes <= data + size, "tensor in bounds");
    sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];  // ASan flags a bad view here
  }
  for (const auto& kv : p.kv) check(!kv.second.to_display(3).empty(), "display");

  std::vector<uint8_t> once;
  try {
    once = writer_for(p).serialize(static_cast<uint32_t>(p.alignment));
  } catch (const kvasir::Error&) {
    return 0;  // the writer is stricter than the reader (e.g. tensor names over 63 bytes)
  }
  ParsedGGUF q;
  try {
    q = kvasir::gguf::parse_gguf(once.data(), once.size(), "round-trip");
  } catch (const kvasir::Error& e) {
    std::fprintf(stderr, "gguf_fuzz: writer output does not parse: %s\n", e.what());
    std::abort();
  }
  check(q.kv.size() == p.kv.size() && q.tensors.size() == p.tensors.size(), "round-trip counts");
  for (size_t i = 0; i < p.kv.size(); ++i) {
    check(q.kv[i].first == p.kv[i].first, "round-trip key order");
    check(q.kv[i].second.type == p.kv[i].second.type, "round-trip value type");
  }
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const auto& a = p.tensors[i];
    const auto& b = q.tensors[i];
    check(a.name == b.name && a.type == b.type && a.shape == b.shape && a.nbytes == b.nbytes,
          "round-trip tensor info");
    check(std::memcmp(a.data, b.data, a.nbytes) == 0, "round-trip tensor bytes");
  }
  std::vector<uint8_t> twice = writer_for(q).serialize(static_cast<uint32_t>(q.alignment));
  check(once == twice, "writer output is a fixed point");
  return 0;
}
