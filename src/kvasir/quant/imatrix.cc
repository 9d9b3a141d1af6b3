#include "kvasir/quant/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string_view>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"
#include "kvasir/util/mmap_file.h"

namespace kvasir {

namespace {

constexpr std::string_view kSumsSuffix = ".in_sum2";
constexpr std::string_view kCountsSuffix = ".counts";

bool strip_suffix(std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  s.resize(s.size() - suffix.size());
  return true;
}

void check_finite(const Imatrix& m) {
  for (const auto& [name, v] : m.importance)
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        fail("{}: imatrix entry {} has a non-finite importance ({}) at column {}", m.path, name,
             v[i], i);
}

void read_gguf(Imatrix& m) {
  gguf::GGUFFile f(m.path);
  const gguf::Value* datasets = f.find("imatrix.datasets");
  const gguf::Value* chunk_count = f.find("imatrix.chunk_count");
  const gguf::Value* chunk_size = f.find("imatrix.chunk_size");
  if (!datasets || !chunk_count || !chunk_size)
    fail(
        "{}: not an imatrix file: GGUF without imatrix.datasets, imatrix.chunk_count and "
        "imatrix.chunk_size (llama-quantize refuses it too)",
        m.path);
  if (datasets->type == gguf::ValueType::ARRAY &&
      datasets->as_array().elem_type == gguf::ValueType::STRING)
    m.datasets = f.get_string_array("imatrix.datasets");
  m.chunk_count = static_cast<int>(f.get_int("imatrix.chunk_count"));
  m.chunk_size = static_cast<int>(f.get_int("imatrix.chunk_size"));
  if (f.tensors().empty()) fail("{}: imatrix file has no entries", m.path);

  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> parts;
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::string name = t.name;
    if (strip_suffix(name, kSumsSuffix))
      parts[name].first = &t;
    else if (strip_suffix(name, kCountsSuffix))
      parts[name].second = &t;
  }
  if (parts.empty()) fail("{}: imatrix file has no NAME.in_sum2 / NAME.counts tensors", m.path);
  for (const auto& [name, p] : parts) {
    const auto [sums, counts] = p;
    if (!sums || !counts)
      fail("{}: imatrix entry {} has {} but no {}", m.path, name, sums ? "in_sum2" : "counts",
           sums ? "counts" : "in_sum2");
    if (sums->type != DType::F32 || counts->type != DType::F32)
      fail("{}: imatrix entry {}: in_sum2 and counts must be f32 (they are {} and {})", m.path,
           name, dtype_name(sums->type), dtype_name(counts->type));
    const int64_t nval = sums->n_elements(), nmat = counts->n_elements();
    if (nmat < 1 || nval % nmat != 0)
      fail("{}: imatrix entry {}: {} sums do not split into {} matrices", m.path, name, nval, nmat);
    ImatrixStats& s = m.stats[name];
    std::vector<float> sv(static_cast<size_t>(nval)), cv(static_cast<size_t>(nmat));
    std::memcpy(sv.data(), sums->data, sv.size() * sizeof(float));
    std::memcpy(cv.data(), counts->data, cv.size() * sizeof(float));
    s.sum_sq.assign(sv.begin(), sv.end());
    s.counts.resize(cv.size());
    for (size_t j = 0; j < cv.size(); ++j) {
      if (!std::isfinite(cv[j]) || cv[j] < 0)
        fail("{}: imatrix entry {}: count {} of matrix {} is not a token count", m.path, name,
             cv[j], j);
      s.counts[j] = std::lround(cv[j]);
    }
    // llama-quantize: the mean over the tokens each matrix saw, 1 for a matrix that saw none.
    std::vector<float>& e = m.importance[name];
    e.resize(sv.size());
    const int64_t cols = nval / nmat;
    for (int64_t j = 0; j < nmat; ++j) {
      const float count = static_cast<float>(s.counts[static_cast<size_t>(j)]);
      for (int64_t i = 0; i < cols; ++i) {
        const size_t k = static_cast<size_t>(j * cols + i);
        e[k] = count > 0.0f ? sv[k] / count : 1.0f;
      }
    }
  }
}

// Reads the legacy .dat format from the bytes of the file.
void read_dat(Imatrix& m) {
  MappedFile file(m.path);
  const uint8_t* p = file.data();
  const size_t size = file.size();
  size_t at = 0;
  auto read_i32 = [&](const char* what) {
    if (size - at < 4)
      fail(
          "{}: not an imatrix file (neither GGUF nor llama.cpp's legacy .dat): truncated at {} "
          "(offset {})",
          m.path, what, at);
    int32_t v;
    std::memcpy(&v, p + at, 4);
    at += 4;
    return v;
  };
  const int32_t n_entries = read_i32("the entry count");
  if (n_entries < 1)
    fail("{}: not an imatrix file (neither GGUF nor llama.cpp's legacy .dat): entry count {}",
         m.path, n_entries);
  for (int32_t i = 0; i < n_entries; ++i) {
    const int32_t len = read_i32("an entry name's length");
    if (len < 0 || static_cast<size_t>(len) > size - at)
      fail("{}: not an imatrix file (legacy .dat): entry {} has a name of {} bytes at offset {}",
           m.path, i + 1, len, at - 4);
    std::string name(reinterpret_cast<const char*>(p + at), static_cast<size_t>(len));
    name.resize(std::strlen(name.c_str()));  // as llama.cpp reads it, up to a NUL
    at += static_cast<size_t>(len);
    const int32_t ncall = read_i32("an entry's call count");
    const int32_t nval = read_i32("an entry's value count");
    if (nval < 1 || static_cast<size_t>(nval) > (size - at) / 4)
      fail("{}: not an imatrix file (legacy .dat): entry {} ({}) has {} values at offset {}",
           m.path, i + 1, name, nval, at - 4);
    std::vector<float> v(static_cast<size_t>(nval));
    std::memcpy(v.data(), p + at, v.size() * 4);
    at += v.size() * 4;
    ImatrixStats& s = m.stats[name];
    s.sum_sq.assign(v.begin(), v.end());
    s.counts = {ncall};
    std::vector<float>& e = m.importance[name];
    e = v;
    if (ncall > 0)
      for (float& x : e) x /= static_cast<float>(ncall);
  }
  // Optional trailer: the chunk count and the dataset name.
  if (at < size) {
    m.chunk_count = read_i32("the chunk count");
    if (size - at >= 4) {
      const int32_t len = read_i32("the dataset name's length");
      if (len > 0 && static_cast<size_t>(len) <= size - at) {
        std::string ds(reinterpret_cast<const char*>(p + at), static_cast<size_t>(len));
        ds.resize(std::strlen(ds.c_str()));
        m.datasets.push_back(ds);
      }
    }
  }
}

void check_entry(const std::string& path, const std::string& name, const ImatrixStats& s) {
  if (s.counts.empty() || s.sum_sq.size() % s.counts.size() != 0)
    fail("{}: imatrix entry {}: {} sums do not split into {} matrices", path, name, s.sum_sq.size(),
         s.counts.size());
}

}  // namespace

Imatrix read_imatrix(const std::string& path) {
  Imatrix m;
  m.path = path;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open the imatrix file ({})", path, std::strerror(errno));
    char magic[4] = {};
    in.read(magic, 4);
    m.legacy = !(in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0);
  }
  if (m.legacy)
    read_dat(m);
  else
    read_gguf(m);
  check_finite(m);
  return m;
}

void write_imatrix_gguf(const std::string& path, const std::map<std::string, ImatrixStats>& stats,
                        const ImatrixMeta& meta) {
  gguf::GGUFWriter w;
  w.set("general.type", gguf::Value::str("imatrix"));
  w.set("imatrix.datasets", gguf::Value::string_array(meta.datasets));
  w.set("imatrix.chunk_count", gguf::Value::u32(static_cast<uint32_t>(meta.chunk_count)));
  w.set("imatrix.chunk_size", gguf::Value::u32(static_cast<uint32_t>(meta.chunk_size)));
  for (const auto& [name, s] : stats) {  // std::map: by name, as llama-imatrix sorts them
    if (s.counts.empty() || s.sum_sq.empty()) continue;
    check_entry(path, name, s);
    const int64_t nmat = static_cast<int64_t>(s.counts.size());
    const int64_t cols = static_cast<int64_t>(s.sum_sq.size()) / nmat;
    std::vector<uint8_t> sums(s.sum_sq.size() * 4), counts(s.counts.size() * 4);
    for (size_t i = 0; i < s.sum_sq.size(); ++i) {
      const float f = static_cast<float>(s.sum_sq[i]);
      std::memcpy(sums.data() + 4 * i, &f, 4);
    }
    for (size_t i = 0; i < s.counts.size(); ++i) {
      const float f = static_cast<float>(s.counts[i]);
      std::memcpy(counts.data() + 4 * i, &f, 4);
    }
    // Shapes as ggml stores them: trailing dimensions of 1 are not written.
    std::vector<int64_t> sums_shape = {cols, nmat}, counts_shape = {1, nmat};
    if (nmat == 1) sums_shape = {cols}, counts_shape = {1};
    w.add_tensor_copy(name + std::string(kSumsSuffix), DType::F32, sums_shape, std::move(sums));
    w.add_tensor_copy(name + std::string(kCountsSuffix), DType::F32, counts_shape,
                      std::move(counts));
  }
  w.write(path);
}

void write_imatrix_dat(const std::string& path, const std::map<std::string, ImatrixStats>& stats,
                       const ImatrixMeta& meta) {
  if (meta.chunk_size <= 0)
    fail("{}: the legacy imatrix format needs a chunk size > 0 (got {})", path, meta.chunk_size);
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  auto put_i32 = [&](int32_t v) { put(&v, 4); };
  std::vector<const std::string*> names;
  for (const auto& [name, s] : stats) {
    if (s.counts.empty()) continue;
    check_entry(path, name, s);
    if (std::all_of(s.counts.begin(), s.counts.end(), [](int64_t c) { return c == 0; })) continue;
    names.push_back(&name);
  }
  put_i32(static_cast<int32_t>(names.size()));
  for (const std::string* name : names) {
    const ImatrixStats& s = stats.at(*name);
    put_i32(static_cast<int32_t>(name->size()));
    put(name->data(), name->size());
    const int64_t max_count = *std::max_element(s.counts.begin(), s.counts.end());
    const int32_t ncall = static_cast<int32_t>((max_count + meta.chunk_size - 1) / meta.chunk_size);
    put_i32(ncall);
    const size_t nval = s.sum_sq.size(), per_mat = nval / s.counts.size();
    put_i32(static_cast<int32_t>(nval));
    for (size_t i = 0; i < nval; ++i) {
      float count = static_cast<float>(s.counts[i / per_mat]);
      float value = static_cast<float>(s.sum_sq[i]);
      if (count == 0.0f) value = 1.0f, count = 1.0f;
      const float v = (value / count) * static_cast<float>(ncall);
      put(&v, 4);
    }
  }
  put_i32(meta.chunk_count);
  const std::string ds = meta.datasets.empty() ? std::string() : meta.datasets.back();
  put_i32(static_cast<int32_t>(ds.size()));
  put(ds.data(), ds.size());

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("{}: cannot write ({})", tmp, std::strerror(errno));
    f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    if (!f) fail("{}: write failed ({})", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("{}: cannot rename {} into place ({})", path, tmp, std::strerror(errno));
}

}  // namespace kvasir
