#include "kvasir/quant/gguf_quantize.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <mutex>
#include <set>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"
#include "kvasir/util/timer.h"

namespace kvasir {

namespace {

bool is_quantized(DType t) {
  return dtype_info(t).block_size > 1;
}

bool is_token_embd(const std::string& n) {
  return n == "token_embd.weight" || n == "per_layer_token_embd.weight";
}

// Floats held at a time while converting one tensor (rows are processed in slabs of this size).
constexpr uint64_t kSlabBytes = 64ull << 20;

// The first element of an integer or integer-array value (per-layer head counts).
int64_t first_int(const gguf::Value* v, int64_t def) {
  if (!v) return def;
  if (v->type == gguf::ValueType::ARRAY) {
    const gguf::Array& a = v->as_array();
    return a.items.empty() ? def : a.items.front().as_int();
  }
  return v->as_int();
}

// Runs fn(begin, end) over [0, n) on the pool; the first exception any thread throws is
// rethrown here once all have finished.
template <class F>
void parallel_rows(ThreadPool& pool, int64_t n, F&& fn) {
  std::exception_ptr err;
  std::mutex mu;
  pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
    try {
      fn(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!err) err = std::current_exception();
    }
  });
  if (err) std::rethrow_exception(err);
}

// One converted tensor: what it needs beyond its TensorChoice.
struct Job {
  const gguf::TensorInfo* t = nullptr;
  DType to = DType::F32;
  const float* importance = nullptr;  // n_mat * cols values, or null
};

std::vector<uint8_t> convert(ThreadPool& pool, const Job& job, uint64_t& elements_done,
                             const std::function<void(uint64_t)>& on_slab) {
  const gguf::TensorInfo& t = *job.t;
  const int64_t cols = t.shape[0];
  const int64_t rows = t.n_elements() / cols;
  const int64_t rows_per_mat = t.shape.size() >= 2 ? t.shape[1] : rows;
  const size_t src_row = row_bytes(t.type, cols), dst_row = row_bytes(job.to, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * dst_row);
  const int64_t slab = std::max<int64_t>(
      1, std::min<int64_t>(rows,
                           static_cast<int64_t>(kSlabBytes / (4 * static_cast<uint64_t>(cols)))));
  std::vector<float> buf;
  if (t.type != DType::F32) buf.resize(static_cast<size_t>(slab * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += slab) {
    const int64_t n = std::min(slab, rows - r0);
    const uint8_t* src = t.data + static_cast<size_t>(r0) * src_row;
    parallel_rows(pool, n, [&](int64_t b, int64_t e) {
      const float* x;
      if (t.type == DType::F32) {
        x = reinterpret_cast<const float*>(src);
      } else {
        for (int64_t r = b; r < e; ++r)
          dequantize_row(t.type, src + static_cast<size_t>(r) * src_row,
                         buf.data() + static_cast<size_t>(r * cols), cols);
        x = buf.data();
      }
      // Rows of one expert matrix share its slice of the importance.
      for (int64_t r = b; r < e;) {
        const int64_t g = r0 + r, mat = g / rows_per_mat;
        const int64_t end = std::min(e, (mat + 1) * rows_per_mat - r0);
        quantize_rows(job.to, x + static_cast<size_t>(r * cols),
                      out.data() + static_cast<size_t>(g) * dst_row, end - r, cols,
                      job.importance ? job.importance + static_cast<size_t>(mat * cols) : nullptr);
        r = end;
      }
    });
    elements_done += static_cast<uint64_t>(n * cols);
    on_slab(static_cast<uint64_t>(n) * src_row);
  }
  return out;
}

// Fails now, with the type's own message, if a quantizer the plan needs is missing.
void probe_quantizer(DType t) {
  const int bs = dtype_info(t).block_size;
  const int64_t n = bs == 1 ? 32 : (bs == 32 ? 256 : bs);
  std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(n), 1.0f);
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
  std::vector<uint8_t> out(row_bytes(t, n));
  quantize_rows(t, x.data(), out.data(), 1, n, w.data());
}

}  // namespace

MixtureModel mixture_model(const gguf::GGUFFile& f) {
  MixtureModel m;
  m.arch = f.get_string("general.architecture", "");
  const std::string& a = m.arch;
  m.n_layer = static_cast<int>(f.get_int(a + ".block_count", 0));
  m.n_head = static_cast<int>(first_int(f.find(a + ".attention.head_count"), 0));
  m.n_head_kv = static_cast<int>(first_int(f.find(a + ".attention.head_count_kv"), m.n_head));
  m.n_expert = static_cast<int>(f.get_int(a + ".expert_count", 0));
  return m;
}

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, DType target,
                             const QuantizeOptions& options) {
  const std::optional<FileType> ft = mixture_for_type(target);
  if (!ft)
    fail(
        "quantize: {} is not a single-type file (one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
        "q5_1, q6_k, iq4_nl, iq4_xs)",
        dtype_name(target));
  QuantizeOptions o = options;
  o.pure = true;
  return quantize_gguf(in_path, out_path, *ft, o);
}

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path,
                             FileType ftype, const QuantizeOptions& options) {
  const double t0 = now_seconds();
  const std::string_view mix = mixture_name(ftype);
  if (!options.dry_run) {
    std::error_code ec;
    if (in_path == out_path || std::filesystem::equivalent(in_path, out_path, ec))
      fail("quantize: output path must differ from the input {}", in_path);
  }
  const std::unique_ptr<gguf::GGUFFile> in_file = hf::open_model_file(in_path);
  const gguf::GGUFFile& in = *in_file;
  const std::vector<gguf::TensorInfo>& tensors = in.tensors();
  const Imatrix* im =
      options.imatrix && !options.imatrix->importance.empty() ? options.imatrix : nullptr;

  std::vector<MixtureTensor> desc;
  std::vector<std::string> names;
  desc.reserve(tensors.size());
  for (const gguf::TensorInfo& t : tensors) {
    desc.push_back({t.name, t.type, t.shape});
    names.push_back(t.name);
  }
  MixtureOptions mo;
  mo.ftype = ftype;
  mo.pure = options.pure;
  mo.has_imatrix = im != nullptr;
  mo.leave_output_tensor = options.leave_output_tensor;
  mo.output_tensor_type = options.output_tensor_type;
  mo.token_embedding_type = options.token_embedding_type;
  const std::vector<TensorChoice> choices = choose_tensor_types(mixture_model(in), desc, mo);
  const std::vector<size_t> order = llama_tensor_order(names);

  QuantizeReport rep;
  rep.ftype = ftype;
  std::vector<Job> jobs(tensors.size());
  std::set<DType> needed;
  uint64_t elements_total = 0;
  bool needs_imatrix = false;
  auto override_of = [&](const std::string& name) -> const TensorOverride* {
    if (!options.overrides) return nullptr;
    const auto it = options.overrides->find(name);
    return it == options.overrides->end() ? nullptr : &it->second;
  };
  if (options.overrides)
    for (const auto& [name, ov] : *options.overrides)
      if (!in.find_tensor(name))
        fail("{}: override for tensor {}, which is not in the file", in_path, name);
  for (size_t i : order) {
    const gguf::TensorInfo& t = tensors[i];
    const TensorChoice& c = choices[i];
    if (const TensorOverride* ov = override_of(t.name)) {
      const uint64_t want =
          static_cast<uint64_t>(t.n_elements() / t.shape[0]) * row_bytes(c.type, t.shape[0]);
      if (ov->type != c.type || ov->bytes.size() != want)
        fail("{}: the override for tensor {} is {} bytes of {}, but {} makes it {} ({} bytes)",
             in_path, t.name, ov->bytes.size(), dtype_name(ov->type), mix, dtype_name(c.type),
             want);
      continue;
    }
    const bool convert = c.type != t.type;
    if (!im && c.convertible && c.requires_imatrix && options.dry_run && !needs_imatrix) {
      needs_imatrix = true;  // as llama-quantize --dry-run: a warning, the sizes still shown
      rep.warnings.push_back(fmt::format(
          "{} needs an importance matrix (--imatrix) for tensor {} ({}) and others: the real run "
          "will refuse to go without one",
          mix, t.name, dtype_name(c.type)));
    }
    if (!im && c.convertible && c.requires_imatrix && !options.dry_run)
      fail(
          "{}: {} needs an importance matrix (--imatrix): tensor {} would be {}, which is "
          "garbage without one (llama-quantize refuses it too)",
          in_path, mix, t.name, dtype_name(c.type));
    if (!convert) continue;
    if (!has_reference_quantizer(c.type) && options.dry_run)
      rep.warnings.push_back(fmt::format("tensor {} would be {}, which kvasir cannot write yet",
                                         t.name, dtype_name(c.type)));
    else if (!has_reference_quantizer(c.type))
      fail("{}: {} would make tensor {} {}, which kvasir cannot write yet", in_path, mix, t.name,
           dtype_name(c.type));
    if (is_quantized(t.type) && !options.allow_requantize)
      fail(
          "{}: tensor {} is already quantized ({}); converting it again (to {}) starts from "
          "rounded values, not the original: quantize from the f32/f16/bf16 file, or pass "
          "--allow-requantize",
          in_path, t.name, dtype_name(t.type), dtype_name(c.type));
    Job& j = jobs[i];
    j.t = &t;
    j.to = c.type;
    if (im) {
      const auto it = im->importance.find(t.name);
      const int64_t n_mat = t.shape.size() >= 3 ? t.shape[2] : 1;
      const int64_t want = t.shape[0] * n_mat;
      if (it == im->importance.end()) {
        if (c.requires_imatrix)
          fail("{}: imatrix {} has no entry for tensor {}, which {} needs to quantize it to {}",
               in_path, im->path, t.name, mix, dtype_name(c.type));
        if (uses_importance(c.type))
          rep.warnings.push_back(
              fmt::format("imatrix has no entry for {}: quantized without one", t.name));
      } else if (static_cast<int64_t>(it->second.size()) != want) {
        if (!is_token_embd(t.name))
          fail(
              "{}: imatrix {} entry {} has {} values, but the tensor has rows of {} in {} "
              "matrices ({} values): the imatrix is for another model",
              in_path, im->path, t.name, it->second.size(), t.shape[0], n_mat, want);
        rep.warnings.push_back(fmt::format("imatrix entry {} has {} values, not {}: ignored",
                                           t.name, it->second.size(), want));
      } else {
        j.importance = it->second.data();
      }
    }
    needed.insert(c.type);
    elements_total += static_cast<uint64_t>(t.n_elements());
  }
  if (!options.dry_run)
    for (DType t : needed) {
      try {
        probe_quantizer(t);
      } catch (const Error& e) {
        fail("{}: {} needs the {} quantizer: {}", in_path, mix, dtype_name(t), e.what());
      }
    }

  // Metadata: the input's, then the keys llama-quantize (re)sets, appended in its order.
  std::vector<std::pair<std::string, gguf::Value>> added;
  added.emplace_back("general.quantization_version", gguf::Value::u32(2));
  added.emplace_back("general.file_type", gguf::Value::u32(static_cast<uint32_t>(ftype)));
  if (im) {
    added.emplace_back("quantize.imatrix.file", gguf::Value::str(im->path.substr(0, 127)));
    if (!im->datasets.empty())
      added.emplace_back("quantize.imatrix.dataset",
                         gguf::Value::str(im->datasets.front().substr(0, 127)));
    added.emplace_back("quantize.imatrix.entries_count",
                       gguf::Value::u32(static_cast<uint32_t>(im->importance.size())));
    if (im->chunk_count > 0)
      added.emplace_back("quantize.imatrix.chunks_count",
                         gguf::Value::u32(static_cast<uint32_t>(im->chunk_count)));
  }
  gguf::GGUFWriter w;
  for (const auto& [k, v] : in.metadata()) {
    if (k == "general.alignment" || k == "split.no" || k == "split.count" ||
        k == "split.tensors.count")
      continue;
    if (std::any_of(added.begin(), added.end(), [&](const auto& kv) { return kv.first == k; }))
      continue;
    w.set(k, v);
  }
  for (auto& [k, v] : added) w.set(k, std::move(v));
  for (const auto& [k, v] : options.extra_metadata) w.set(k, gguf::Value::str(v));

  std::optional<ThreadPool> pool;
  if (!options.dry_run && !needed.empty()) pool.emplace(options.n_threads);
  QuantizeProgress pr;
  pr.count = static_cast<int>(tensors.size());
  pr.elements_total = elements_total;
  for (const gguf::TensorInfo& t : tensors) pr.bytes_total += t.nbytes;
  auto report = [&]() {
    if (!options.on_progress) return;
    pr.elapsed_s = now_seconds() - t0;
    options.on_progress(pr);
  };
  uint64_t done_before = 0;
  for (size_t i : order) {
    const gguf::TensorInfo& t = tensors[i];
    const TensorChoice& c = choices[i];
    const Job& j = jobs[i];
    pr.index++;
    pr.name = t.name;
    pr.from = t.type;
    pr.to = c.type;
    pr.bytes_done = done_before;
    report();
    TensorReport tr;
    tr.name = t.name;
    // As ggml writes shapes: without trailing dimensions of 1.
    tr.shape.assign(t.shape.begin(), t.shape.begin() + ggml_n_dims(t.shape));
    tr.from = t.type;
    tr.to = c.type;
    tr.reason = c.reason;
    tr.bytes_in = t.nbytes;
    tr.fallback = c.fallback;
    if (const TensorOverride* ov = override_of(t.name)) {
      tr.converted = true;
      tr.reason = ov->reason;
      tr.bytes_out = ov->bytes.size();
      if (!options.dry_run)
        w.add_tensor(t.name, ov->type, tr.shape, ov->bytes.data(), tr.bytes_out);
      rep.n_quantized++;
    } else if (!j.t) {
      tr.bytes_out = t.nbytes;
      if (!options.dry_run) w.add_tensor(t.name, t.type, tr.shape, t.data, t.nbytes);
    } else {
      tr.converted = true;
      tr.used_imatrix = j.importance != nullptr && uses_importance(c.type);
      const uint64_t rows = static_cast<uint64_t>(t.n_elements() / t.shape[0]);
      tr.bytes_out = rows * row_bytes(c.type, t.shape[0]);
      if (options.dry_run) {
        pr.elements_done += static_cast<uint64_t>(t.n_elements());
      } else {
        std::vector<uint8_t> q = convert(*pool, j, pr.elements_done, [&](uint64_t bytes) {
          pr.bytes_done += bytes;
          report();
        });
        w.add_tensor_copy(t.name, c.type, tr.shape, std::move(q));
      }
      rep.n_quantized++;
    }
    if (c.fallback) rep.n_fallback++;
    rep.n_tensors++;
    rep.bytes_in += tr.bytes_in;
    rep.bytes_out += tr.bytes_out;
    rep.n_elements += static_cast<uint64_t>(t.n_elements());
    done_before += t.nbytes;
    rep.tensors.push_back(std::move(tr));
  }
  pr.bytes_done = done_before;
  if (!options.dry_run) w.write(out_path);
  rep.seconds = now_seconds() - t0;
  return rep;
}

}  // namespace kvasir
