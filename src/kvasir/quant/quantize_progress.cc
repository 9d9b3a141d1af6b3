#include "kvasir/quant/quantize_progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvasir {

namespace {

double mib(uint64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  if (seconds < 60) return fmt::format("{:.1f} s", seconds);
  const long s = std::lround(seconds);
  if (s < 3600) return fmt::format("{} m {:02} s", s / 60, s % 60);
  return fmt::format("{} h {:02} m", s / 3600, (s / 60) % 60);
}

std::string format_progress(const QuantizeProgress& p) {
  const int width = static_cast<int>(std::to_string(p.count).size());
  std::string eta = "ETA ?";
  if (p.elements_total == 0 || p.elements_done >= p.elements_total) {
    eta = "ETA 0 s";
  } else if (p.elements_done > 0 && p.elapsed_s > 0) {
    const double rate = static_cast<double>(p.elements_done) / p.elapsed_s;
    eta = "ETA " + format_duration(static_cast<double>(p.elements_total - p.elements_done) / rate);
  }
  const std::string types = p.from == p.to
                                ? fmt::format("{} (copied)", dtype_name(p.to))
                                : fmt::format("{} -> {}", dtype_name(p.from), dtype_name(p.to));
  return fmt::format("[{:>{}}/{}] {} {} | {:.1f}/{:.1f} MiB | {}, {}", p.index, width, p.count,
                     p.name, types, mib(p.bytes_done), mib(p.bytes_total),
                     format_duration(p.elapsed_s), eta);
}

std::string format_tensor_table(const QuantizeReport& r) {
  size_t wn = 6, ws = 5, wt = 4;
  std::vector<std::string> shapes, types;
  for (const TensorReport& t : r.tensors) {
    shapes.push_back(shape_text(t.shape));
    types.push_back(t.converted ? fmt::format("{} -> {}", dtype_name(t.from), dtype_name(t.to))
                                : std::string(dtype_name(t.to)));
    wn = std::max(wn, t.name.size());
    ws = std::max(ws, shapes.back().size());
    wt = std::max(wt, types.back().size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>9}  {}\n", "tensor", wn, "shape", ws,
                                "type", wt, "MiB", "why");
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorReport& t = r.tensors[i];
    std::string why = t.reason;
    if (t.used_imatrix) why += " [imatrix]";
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>9.3f}  {}\n", t.name, wn, shapes[i], ws,
                       types[i], wt, mib(t.bytes_out), why);
  }
  out += fmt::format(
      "{}: {} tensors, {} converted ({} fell back to a smaller block); {:.2f} MiB ({:.2f} bpw) "
      "-> {:.2f} MiB ({:.2f} bpw)\n",
      mixture_name(r.ftype), r.n_tensors, r.n_quantized, r.n_fallback, mib(r.bytes_in), r.bpw_in(),
      mib(r.bytes_out), r.bpw_out());
  return out;
}

void ProgressPrinter::operator()(const QuantizeProgress& p) {
  if (!tty_) {
    if (p.index == last_index_) return;  // one line per tensor
    last_index_ = p.index;
    std::fprintf(out_, "%s\n", format_progress(p).c_str());
    std::fflush(out_);
    return;
  }
  if (p.index == last_index_ && p.elapsed_s - last_draw_ < 0.1) return;
  last_index_ = p.index;
  last_draw_ = p.elapsed_s;
  std::fprintf(out_, "\r%s\x1b[K", format_progress(p).c_str());
  std::fflush(out_);
  showing_ = true;
}

void ProgressPrinter::finish() {
  if (showing_) std::fputc('\n', out_);
  showing_ = false;
}

}  // namespace kvasir
