// What `kvasir quantize` shows: a progress line while it works (tensor i of n, its name and
// types, the input bytes done and an ETA from the elements converted so far) and, at the end,
// the per-tensor table (name, shape, type chosen and why) with the file's bits per weight.
//
// ProgressPrinter rewrites one line in place ('\r', erase to end of line) when the stream is a
// terminal, at most every 0.1 s; otherwise it prints one plain line per tensor, so a log file
// gets a readable history instead of carriage returns.
#pragma once

#include <cstdio>
#include <string>

#include "kvasir/quant/gguf_quantize.h"

namespace kvasir {

// "[ 12/291] blk.0.ffn_down.weight f16 -> q6_k | 123.4/4400.0 MiB | 3.1 s, ETA 1:23"
std::string format_progress(const QuantizeProgress& p);

// The table, one line per tensor in the order written, then a summary line:
// "48 tensors, 36 converted (36 fell back); 1.12 MiB (32.00 bpw) -> 0.28 MiB (7.92 bpw)".
std::string format_tensor_table(const QuantizeReport& r);

// "3 m 05 s", "42.0 s"
std::string format_duration(double seconds);

class ProgressPrinter {
 public:
  ProgressPrinter(std::FILE* out, bool tty) : out_(out), tty_(tty) {}
  void operator()(const QuantizeProgress& p);
  // Ends the in-place line (a newline) if one is showing.
  void finish();

 private:
  std::FILE* out_;
  bool tty_;
  int last_index_ = 0;
  double last_draw_ = -1;
  bool showing_ = false;
};

}  // namespace kvasir
