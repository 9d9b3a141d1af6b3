// libFuzzer target for the safetensors reader and writer.
//
// Any input must either parse or throw kvasir::Error; sanitizers catch everything else. When it
// parses, the result must be sane (tensor views inside the input, the data section covered
// exactly) and must survive a round trip through SafetensorsWriter: the writer accepts whatever
// the reader accepts, its output parses to the same tensors and metadata, and writing that once
// more gives the same bytes (a fixed point).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvasir/format/safetensors.h"
#include "kvasir/util/error.h"

namespace {

using kvasir::safetensors::ParsedSafetensors;
using kvasir::safetensors::SafetensorsWriter;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "safetensors_fuzz: invariant failed: %s\n", what);
    std::abort();
  }
}

SafetensorsWriter writer_for(const ParsedSafetensors& p) {
  SafetensorsWriter w;
  for (const auto& [k, v] : p.metadata) w.set_metadata(k, v);
  for (const auto& t : p.tensors) w.add_tensor(t.name, t.dtype, t.shape, t.data, t.nbytes());
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ParsedSafetensors p;
  try {
    p = kvasir::safetensors::parse_safetensors(data, size, "fuzz-input");
  } catch (const kvasir::Error&) {
    return 0;
  }

  const uint64_t data_start = 8 + p.header_size;
  check(data_start <= size, "data section inside the input");
  uint64_t covered = 0;
  volatile uint8_t sink = 0;
  for (const auto& t : p.tensors) {
    check(t.begin <= t.end && t.end <= size - data_start, "offsets in the data section");
    check(t.data == data + data_start + t.begin, "tensor view at its offset");
    check(t.n_elements() >= 0 &&
              static_cast<uint64_t>(t.n_elements()) * kvasir::safetensors::dtype_size(t.dtype) ==
                  t.nbytes(),
          "byte count matches the shape");
    if (t.nbytes() > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes() - 1];  // ASan checks views
    covered += t.nbytes();
  }
  check(covered == size - data_start, "data section covered exactly");

  std::vector<uint8_t> once;
  try {
    once = writer_for(p).serialize();
  } catch (const kvasir::Error& e) {
    std::fprintf(stderr, "safetensors_fuzz: writer refuses a parsed file: %s\n", e.what());
    std::abort();
  }
  ParsedSafetensors q;
  try {
    q = kvasir::safetensors::parse_safetensors(once.data(), once.size(), "round-trip");
  } catch (const kvasir::Error& e) {
    std::fprintf(stderr, "safetensors_fuzz: writer output does not parse: %s\n", e.what());
    std::abort();
  }
  check((8 + q.header_size) % 8 == 0, "writer aligns the data section");
  check(q.metadata == p.metadata, "round-trip metadata");
  check(q.tensors.size() == p.tensors.size(), "round-trip tensor count");
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const auto& a = p.tensors[i];
    const auto& b = q.tensors[i];
    check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.nbytes() == b.nbytes(),
          "round-trip tensor info");
    check(a.nbytes() == 0 || std::memcmp(a.data, b.data, a.nbytes()) == 0,
          "round-trip tensor bytes");
  }
  std::vector<uint8_t> twice = writer_for(q).serialize();
  check(once == twice, "writer output is a fixed point");
  return 0;
}
