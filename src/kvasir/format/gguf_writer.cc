// GGUFWriter: serializes metadata and tensors as GGUF v3, to memory or atomically to a file.

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "kvasir/format/gguf.h"
#include "kvasir/util/atomic_file.h"
#include "kvasir/util/error.h"

namespace kvasir::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" as a little-endian uint32
constexpr uint32_t kVersion = 3;
constexpr std::string_view kAlignmentKey = "general.alignment";

// Appends to a byte vector (serialize()).
class VectorSink {
 public:
  explicit VectorSink(std::vector<uint8_t>& out) : out_(out) {}
  void put(const void* p, size_t n) {
    size_t old = out_.size();
    out_.resize(old + n);  // amortized growth; (insert() trips a GCC 12 false warning)
    if (n) std::memcpy(out_.data() + old, p, n);
  }

 private:
  std::vector<uint8_t>& out_;
};

template <class Sink, class T>
void put(Sink& s, T x) {
  s.put(&x, sizeof(T));
}

template <class Sink>
void put_string(Sink& s, std::string_view str) {
  put<Sink, uint64_t>(s, str.size());
  s.put(str.data(), str.size());
}

// Writes the payload of `v` (without its type tag). `v` was checked by check_consistent().
template <class Sink>
void put_value(Sink& s, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8:
      put(s, static_cast<uint8_t>(std::get<uint64_t>(v.v)));
      break;
    case ValueType::INT8:
      put(s, static_cast<int8_t>(std::get<int64_t>(v.v)));
      break;
    case ValueType::UINT16:
      put(s, static_cast<uint16_t>(std::get<uint64_t>(v.v)));
      break;
    case ValueType::INT16:
      put(s, static_cast<int16_t>(std::get<int64_t>(v.v)));
      break;
    case ValueType::UINT32:
      put(s, static_cast<uint32_t>(std::get<uint64_t>(v.v)));
      break;
    case ValueType::INT32:
      put(s, static_cast<int32_t>(std::get<int64_t>(v.v)));
      break;
    case ValueType::FLOAT32:
      put(s, static_cast<float>(std::get<double>(v.v)));
      break;
    case ValueType::UINT64:
      put(s, std::get<uint64_t>(v.v));
      break;
    case ValueType::INT64:
      put(s, std::get<int64_t>(v.v));
      break;
    case ValueType::FLOAT64:
      put(s, std::get<double>(v.v));
      break;
    case ValueType::BOOL:
      put(s, static_cast<uint8_t>(std::get<bool>(v.v) ? 1 : 0));
      break;
    case ValueType::STRING:
      put_string(s, std::get<std::string>(v.v));
      break;
    case ValueType::ARRAY: {
      const Array& a = std::get<Array>(v.v);
      put(s, static_cast<uint32_t>(a.elem_type));
      put(s, static_cast<uint64_t>(a.items.size()));
      for (const Value& x : a.items) put_value(s, x);
      break;
    }
  }
}

int array_depth(const Value& v) {
  const Array* a = std::get_if<Array>(&v.v);
  if (!a) return 0;
  int d = 0;
  for (const Value& x : a->items) d = std::max(d, array_depth(x));
  return d + 1;
}

uint64_t pad_to(uint64_t n, uint64_t a) {
  return (n + a - 1) / a * a;
}

void check_alignment(uint32_t alignment, std::string_view where) {
  if (alignment == 0 || !std::has_single_bit(alignment)) {
    fail("{}: alignment {} must be a nonzero power of two", where, alignment);
  }
}

}  // namespace

void GGUFWriter::set(const std::string& key, Value v) {
  if (key.empty()) fail("GGUFWriter: empty metadata key");
  std::string err = v.check_consistent();
  if (!err.empty()) fail("GGUFWriter: metadata key '{}': {}", key, err);
  // The reader accepts at most kMaxArrayDepth levels of arrays (a flat array is one level).
  if (array_depth(v) > kMaxArrayDepth) {
    fail("GGUFWriter: metadata key '{}': arrays nested {} deep, at most {} allowed", key,
         array_depth(v), kMaxArrayDepth);
  }
  if (key == kAlignmentKey) {
    if (v.type != ValueType::UINT32) {
      fail("GGUFWriter: general.alignment has type {}, expected uint32", v.type_name());
    }
    check_alignment(static_cast<uint32_t>(std::get<uint64_t>(v.v)), "GGUFWriter");
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

void GGUFWriter::add_tensor(const std::string& name, DType type, std::vector<int64_t> shape,
                            const void* data, uint64_t nbytes) {
  if (name.empty()) fail("GGUFWriter: empty tensor name");
  if (name.size() > kMaxTensorNameLength) {
    fail("GGUFWriter: tensor '{}': name is {} bytes, at most {} allowed", name, name.size(),
         kMaxTensorNameLength);
  }
  for (const auto& t : tensors_) {
    if (t.info.name == name) fail("GGUFWriter: duplicate tensor '{}'", name);
  }
  if (shape.empty() || shape.size() > static_cast<size_t>(kMaxDims)) {
    fail("GGUFWriter: tensor '{}': {} dimensions, expected 1 to {}", name, shape.size(), kMaxDims);
  }
  if (!dtype_info(static_cast<uint32_t>(type))) {
    fail("GGUFWriter: tensor '{}': unknown dtype id {}", name, static_cast<uint32_t>(type));
  }
  const DTypeInfo& info = dtype_info(type);
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] <= 0)
      fail("GGUFWriter: tensor '{}': ne[{}] = {}, expected > 0", name, d, shape[d]);
    if (n > std::numeric_limits<int64_t>::max() / shape[d]) {
      fail("GGUFWriter: tensor '{}': element count overflows int64", name);
    }
    n *= shape[d];
  }
  if (shape[0] % info.block_size != 0) {
    fail("GGUFWriter: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}", name,
         shape[0], info.name, info.block_size);
  }
  uint64_t blocks = static_cast<uint64_t>(n / info.block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(info.block_bytes)) {
    fail("GGUFWriter: tensor '{}': byte size overflows uint64", name);
  }
  uint64_t expect = blocks * static_cast<uint64_t>(info.block_bytes);
  if (nbytes != expect) {
    fail("GGUFWriter: tensor '{}': {} bytes given, expected {} for {} {} elements", name, nbytes,
         expect, n, info.name);
  }
  if (!data && nbytes) fail("GGUFWriter: tensor '{}': null data", name);
  Pending p;
  p.info.name = name;
  p.info.type = type;
  p.info.shape = std::move(shape);
  p.info.nbytes = nbytes;
  p.info.data = static_cast<const uint8_t*>(data);
  tensors_.push_back(std::move(p));
}

void GGUFWriter::add_tensor_copy(const std::string& name, DType type, std::vector<int64_t> shape,
                                 std::vector<uint8_t> bytes) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add_tensor(name, type, std::move(shape), owned->data(), owned->size());
  tensors_.back().owned = std::move(owned);
}

namespace {

template <class Sink>
struct CountingSink {
  Sink& inner;
  uint64_t pos = 0;
  void put(const void* p, size_t n) {
    inner.put(p, n);
    pos += n;
  }
};

template <class Sink>
void emit(Sink& s, const std::vector<std::pair<std::string, Value>>& kv,
          const std::vector<TensorInfo>& tensors, uint32_t alignment) {
  bool has_alignment_key = false;
  for (const auto& p : kv) has_alignment_key |= p.first == kAlignmentKey;
  bool add_alignment_key = !has_alignment_key && alignment != kDefaultAlignment;
  const Value alignment_value = Value::u32(alignment);

  CountingSink<Sink> cs{s};
  put(cs, kMagic);
  put(cs, kVersion);
  put(cs, static_cast<uint64_t>(tensors.size()));
  put(cs, static_cast<uint64_t>(kv.size() + (add_alignment_key ? 1 : 0)));
  auto put_kv = [&](std::string_view key, const Value& v) {
    put_string(cs, key);
    put(cs, static_cast<uint32_t>(v.type));
    put_value(cs, v);
  };
  for (const auto& [key, v] : kv) put_kv(key, key == kAlignmentKey ? alignment_value : v);
  if (add_alignment_key) put_kv(kAlignmentKey, alignment_value);

  uint64_t offset = 0;
  for (const TensorInfo& t : tensors) {
    put_string(cs, t.name);
    put(cs, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) put(cs, d);
    put(cs, static_cast<uint32_t>(t.type));
    put(cs, offset);
    offset += pad_to(t.nbytes, alignment);
  }

  static const uint8_t kZeros[256] = {};
  auto pad = [&] {
    uint64_t n = pad_to(cs.pos, alignment) - cs.pos;
    while (n > 0) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof(kZeros)));
      cs.put(kZeros, k);
      n -= k;
    }
  };
  if (!tensors.empty()) pad();
  for (const TensorInfo& t : tensors) {
    cs.put(t.data, static_cast<size_t>(t.nbytes));
    pad();
  }
}

}  // namespace

std::vector<uint8_t> GGUFWriter::serialize(uint32_t alignment) const {
  check_alignment(alignment, "GGUFWriter");
  std::vector<TensorInfo> infos;
  infos.reserve(tensors_.size());
  for (const auto& t : tensors_) infos.push_back(t.info);
  std::vector<uint8_t> out;
  VectorSink sink(out);
  emit(sink, kv_, infos, alignment);
  return out;
}

void GGUFWriter::write(const std::string& path, uint32_t alignment) const {
  check_alignment(alignment, path);
  std::vector<TensorInfo> infos;
  infos.reserve(tensors_.size());
  for (const auto& t : tensors_) infos.push_back(t.info);

  write_file_atomically(path, [&](FileSink& sink) { emit(sink, kv_, infos, alignment); });
}

}  // namespace kvasir::gguf
