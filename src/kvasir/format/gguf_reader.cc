// GGUF parsing (parse_gguf) and the memory-mapped GGUFFile built on it.
//
// Every read goes through Cursor, which checks the remaining byte count first; every size
// computation is done in uint64 with explicit overflow checks. Counts read from the file are
// bounded by the bytes left before anything is reserved, so a hostile header cannot make the
// reader allocate more than a small multiple of the file size.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"
#include "kvasir/util/printable.h"

namespace kvasir::gguf {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kMagic = 0x46554747;                  // "GGUF" read as a little-endian uint32
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, type, smallest value
constexpr uint64_t kMinTensorBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset

bool valid_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::FLOAT64);
}

// Smallest encoding of one value of type t: bounds array lengths by the bytes left.
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
    case ValueType::STRING:
      return 8;
    case ValueType::ARRAY:
      return 4 + 8;
  }
  return 1;
}

class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  uint64_t size() const { return size_; }
  const uint8_t* data() const { return data_; }

  // Error context, rendered only when an error is thrown.
  void set_header() { kind_ = Kind::kHeader; }
  void set_key(uint64_t index) {
    kind_ = Kind::kKeyIndex;
    ordinal_ = index;
    depth_ = 0;
  }
  void set_key_name(std::string_view name) {
    kind_ = Kind::kKey;
    ctx_name_ = name;
  }
  void set_tensor(uint64_t index) {
    kind_ = Kind::kTensorIndex;
    ordinal_ = index;
  }
  void set_tensor_name(std::string_view name) {
    kind_ = Kind::kTensor;
    ctx_name_ = name;
  }
  // Array element path for messages like key 'x'[3][7].
  void push_index() { idx_[depth_++] = 0; }
  void set_index(uint64_t i) { idx_[depth_ - 1] = i; }
  void pop_index() { --depth_; }
  int depth() const { return depth_; }

  [[noreturn]] void fail_at(uint64_t at, std::string_view what, std::string_view expected) const {
    std::string ctx;
    switch (kind_) {
      case Kind::kHeader:
        break;
      case Kind::kKeyIndex:
        ctx = fmt::format("key #{}", ordinal_);
        break;
      case Kind::kKey:
        ctx = fmt::format("key '{}'", printable(ctx_name_));
        break;
      case Kind::kTensorIndex:
        ctx = fmt::format("tensor #{}", ordinal_);
        break;
      case Kind::kTensor:
        ctx = fmt::format("tensor '{}'", printable(ctx_name_));
        break;
    }
    if (kind_ == Kind::kKey || kind_ == Kind::kKeyIndex) {
      for (int i = 0; i < depth_; ++i) ctx += fmt::format("[{}]", idx_[i]);
    }
    if (!ctx.empty()) ctx += ", ";
    fail("{}: {} ({}at offset {}): expected {}", name_, what, ctx, at, expected);
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      fail_at(pos_, fmt::format("file truncated in {}", what),
              fmt::format("{} more bytes, found {} (file is {} bytes)", n, remaining(), size_));
    }
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T x;
    std::memcpy(&x, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return x;
  }

  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

  std::string_view read_string(std::string_view what) {
    uint64_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > remaining()) {
      fail_at(at, fmt::format("{} length {} runs past the end of the file", what, len),
              fmt::format("a length of at most {} (the bytes left)", remaining()));
    }
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  enum class Kind { kHeader, kKeyIndex, kKey, kTensorIndex, kTensor };

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
  Kind kind_ = Kind::kHeader;
  uint64_t ordinal_ = 0;
  std::string_view ctx_name_;
  uint64_t idx_[kMaxArrayDepth + 1] = {};
  int depth_ = 0;
};

ValueType read_value_type(Cursor& c, std::string_view what) {
  uint64_t at = c.pos();
  uint32_t t = c.read<uint32_t>(what);
  if (!valid_value_type(t)) {
    c.fail_at(at, fmt::format("unknown {} {}", what, t), "a GGUF value type id in 0..12");
  }
  return static_cast<ValueType>(t);
}

Value read_value(Cursor& c, ValueType type, int depth);

// Reads `count` values of a fixed-width type into items (count already bounded by the caller).
template <class Raw, class Held>
void read_fixed_items(Cursor& c, ValueType type, uint64_t count, std::vector<Value>& items) {
  const uint8_t* p = c.data() + c.pos();
  for (uint64_t i = 0; i < count; ++i) {
    Raw x;
    std::memcpy(&x, p + i * sizeof(Raw), sizeof(Raw));
    items.push_back(Value{type, Held(x)});
  }
}

Value read_array(Cursor& c, int depth) {
  uint64_t at = c.pos();
  if (depth >= kMaxArrayDepth) {
    c.fail_at(at, fmt::format("arrays nested more than {} deep", kMaxArrayDepth),
              fmt::format("at most {} levels of nested arrays", kMaxArrayDepth));
  }
  ValueType elem = read_value_type(c, "array element type");
  uint64_t count_at = c.pos();
  uint64_t count = c.read<uint64_t>("array length");
  uint64_t min_bytes = min_value_bytes(elem);
  if (count > c.remaining() / min_bytes) {
    c.fail_at(count_at,
              fmt::format("array length {} of {} cannot fit in the {} bytes left", count,
                          value_type_name(elem), c.remaining()),
              fmt::format("at most {} elements", c.remaining() / min_bytes));
  }
  Array a;
  a.elem_type = elem;
  a.items.reserve(static_cast<size_t>(count));
  switch (elem) {
    // Fixed-width elements: the whole run was bounds-checked above.
    case ValueType::UINT8:
      read_fixed_items<uint8_t, uint64_t>(c, elem, count, a.items);
      break;
    case ValueType::INT8:
      read_fixed_items<int8_t, int64_t>(c, elem, count, a.items);
      break;
    case ValueType::UINT16:
      read_fixed_items<uint16_t, uint64_t>(c, elem, count, a.items);
      break;
    case ValueType::INT16:
      read_fixed_items<int16_t, int64_t>(c, elem, count, a.items);
      break;
    case ValueType::UINT32:
      read_fixed_items<uint32_t, uint64_t>(c, elem, count, a.items);
      break;
    case ValueType::INT32:
      read_fixed_items<int32_t, int64_t>(c, elem, count, a.items);
      break;
    case ValueType::FLOAT32:
      read_fixed_items<float, double>(c, elem, count, a.items);
      break;
    case ValueType::UINT64:
      read_fixed_items<uint64_t, uint64_t>(c, elem, count, a.items);
      break;
    case ValueType::INT64:
      read_fixed_items<int64_t, int64_t>(c, elem, count, a.items);
      break;
    case ValueType::FLOAT64:
      read_fixed_items<double, double>(c, elem, count, a.items);
      break;
    case ValueType::BOOL:
    case ValueType::STRING:
    case ValueType::ARRAY: {
      c.push_index();
      for (uint64_t i = 0; i < count; ++i) {
        c.set_index(i);
        a.items.push_back(read_value(c, elem, depth + 1));
      }
      c.pop_index();
      return Value{ValueType::ARRAY, std::move(a)};
    }
  }
  // Advance past the fixed-width run read in place.
  c.skip(count * min_bytes, "array data");
  return Value{ValueType::ARRAY, std::move(a)};
}

Value read_value(Cursor& c, ValueType type, int depth) {
  switch (type) {
    case ValueType::UINT8:
      return Value{type, uint64_t{c.read<uint8_t>("uint8 value")}};
    case ValueType::INT8:
      return Value{type, int64_t{c.read<int8_t>("int8 value")}};
    case ValueType::UINT16:
      return Value{type, uint64_t{c.read<uint16_t>("uint16 value")}};
    case ValueType::INT16:
      return Value{type, int64_t{c.read<int16_t>("int16 value")}};
    case ValueType::UINT32:
      return Value{type, uint64_t{c.read<uint32_t>("uint32 value")}};
    case ValueType::INT32:
      return Value{type, int64_t{c.read<int32_t>("int32 value")}};
    case ValueType::FLOAT32:
      return Value{type, double{c.read<float>("float32 value")}};
    case ValueType::UINT64:
      return Value{type, c.read<uint64_t>("uint64 value")};
    case ValueType::INT64:
      return Value{type, c.read<int64_t>("int64 value")};
    case ValueType::FLOAT64:
      return Value{type, c.read<double>("float64 value")};
    case ValueType::BOOL: {
      uint64_t at = c.pos();
      uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1) c.fail_at(at, fmt::format("bool value {}", b), "0 or 1");
      return Value{type, b == 1};
    }
    case ValueType::STRING:
      return Value{type, std::string(c.read_string("string value"))};
    case ValueType::ARRAY:
      return read_array(c, depth);
  }
  c.fail_at(c.pos(), "unknown value type", "a GGUF value type id in 0..12");
}

void read_header(Cursor& c, ParsedGGUF& out, uint64_t& n_tensors, uint64_t& n_kv) {
  c.set_header();
  c.need(4, "magic");
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    const uint8_t* m = c.data();
    c.fail_at(0, fmt::format("bad magic {:02x} {:02x} {:02x} {:02x}", m[0], m[1], m[2], m[3]),
              "'GGUF' (47 47 55 46): this is not a GGUF file");
  }
  uint32_t version = c.read<uint32_t>("version");
  if (version != 2 && version != 3) {
    std::string what = fmt::format("unsupported GGUF version {}", version);
    if (version == 1) what += " (GGUF v1 is obsolete; re-convert the model)";
    if (version == 0x02000000u || version == 0x03000000u) what += " (a big-endian GGUF file?)";
    c.fail_at(4, what, "version 2 or 3");
  }
  out.version = version;
  n_tensors = c.read<uint64_t>("tensor count");
  n_kv = c.read<uint64_t>("metadata key count");
  // Bound both counts by the bytes left so nothing absurd is reserved or looped over.
  uint64_t rem = c.remaining();
  if (n_tensors > rem / kMinTensorBytes) {
    c.fail_at(8, fmt::format("tensor count {} cannot fit in the {} bytes left", n_tensors, rem),
              fmt::format("at most {} tensors", rem / kMinTensorBytes));
  }
  if (n_kv > rem / kMinKvBytes) {
    c.fail_at(16, fmt::format("metadata key count {} cannot fit in the {} bytes left", n_kv, rem),
              fmt::format("at most {} keys", rem / kMinKvBytes));
  }
  if (n_kv * kMinKvBytes + n_tensors * kMinTensorBytes > rem) {  // each term <= rem: no overflow
    c.fail_at(8,
              fmt::format("{} tensors and {} metadata keys cannot fit in the {} bytes left",
                          n_tensors, n_kv, rem),
              "counts that fit in the file");
  }
}

void read_metadata(Cursor& c, ParsedGGUF& out, uint64_t n_kv) {
  std::unordered_set<std::string> seen;
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.set_key(i);
    uint64_t at = c.pos();
    std::string key(c.read_string("key name"));
    if (key.empty()) c.fail_at(at, "empty key name", "a non-empty key");
    c.set_key_name(key);
    if (!seen.insert(key).second) c.fail_at(at, "duplicate key", "each key once");
    uint64_t value_at = c.pos();
    ValueType t = read_value_type(c, "value type");
    Value v = read_value(c, t, 0);
    if (key == "general.alignment") {
      if (v.type != ValueType::UINT32) {
        c.fail_at(value_at, fmt::format("general.alignment has type {}", v.type_name()), "uint32");
      }
      uint64_t a = std::get<uint64_t>(v.v);
      if (a == 0 || (a & (a - 1)) != 0) {
        c.fail_at(value_at, fmt::format("general.alignment is {}", a), "a nonzero power of two");
      }
      out.alignment = a;
    }
    out.kv.emplace_back(std::move(key), std::move(v));
    c.set_header();  // `key` was moved from: drop the view into it
  }
}

void read_tensor_infos(Cursor& c, ParsedGGUF& out, uint64_t n_tensors) {
  std::unordered_set<std::string> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.set_tensor(i);
    uint64_t at = c.pos();
    TensorInfo ti;
    ti.name = std::string(c.read_string("tensor name"));
    if (ti.name.empty()) c.fail_at(at, "empty tensor name", "a non-empty name");
    c.set_tensor_name(ti.name);
    if (!seen.insert(ti.name).second) c.fail_at(at, "duplicate tensor name", "each name once");

    uint64_t dims_at = c.pos();
    uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
    if (n_dims < 1 || n_dims > static_cast<uint32_t>(kMaxDims)) {
      c.fail_at(dims_at, fmt::format("tensor has {} dimensions", n_dims),
                fmt::format("1 to {} dimensions", kMaxDims));
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne_at = c.pos();
      int64_t ne = c.read<int64_t>("tensor shape");
      if (ne <= 0) c.fail_at(ne_at, fmt::format("ne[{}] is {}", d, ne), "a positive dimension");
      if (n_elements > std::numeric_limits<int64_t>::max() / ne) {
        c.fail_at(ne_at, fmt::format("element count overflows int64 at ne[{}] = {}", d, ne),
                  "at most 2^63-1 elements");
      }
      n_elements *= ne;
      ti.shape.push_back(ne);
    }

    uint64_t type_at = c.pos();
    uint32_t type_id = c.read<uint32_t>("tensor type");
    std::optional<DTypeInfo> info = dtype_info(type_id);
    if (!info) {
      c.fail_at(type_at, fmt::format("unknown tensor type id {}", type_id),
                "a ggml type id kvasir knows (see tensor/dtype.h)");
    }
    ti.type = info->type;
    if (ti.shape[0] % info->block_size != 0) {
      c.fail_at(dims_at,
                fmt::format("ne[0] = {} is not a multiple of the {} block size {}", ti.shape[0],
                            info->name, info->block_size),
                fmt::format("ne[0] divisible by {}", info->block_size));
    }
    uint64_t blocks = static_cast<uint64_t>(n_elements) / static_cast<uint64_t>(info->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(info->block_bytes)) {
      c.fail_at(dims_at, "tensor byte size overflows uint64", "a representable size");
    }
    ti.nbytes = blocks * static_cast<uint64_t>(info->block_bytes);

    uint64_t off_at = c.pos();
    ti.offset = c.read<uint64_t>("tensor data offset");
    if (ti.offset % out.alignment != 0) {
      c.fail_at(off_at, fmt::format("data offset {} is not aligned", ti.offset),
                fmt::format("a multiple of the alignment {}", out.alignment));
    }
    out.tensors.push_back(std::move(ti));
  }
}

// Places tensors in the data section: in bounds and pairwise disjoint.
void place_tensors(Cursor& c, ParsedGGUF& out) {
  c.set_header();
  uint64_t pos = c.pos();
  uint64_t a = out.alignment;
  if (pos > std::numeric_limits<uint64_t>::max() - (a - 1)) {
    c.fail_at(pos, "data section offset overflows", "a smaller alignment");
  }
  out.data_offset = (pos + a - 1) / a * a;
  if (out.tensors.empty()) return;  // vocab-only files may end before the padding
  uint64_t size = c.size();
  if (out.data_offset > size) {
    c.fail_at(
        pos,
        fmt::format("data section at offset {} starts past the end of the file", out.data_offset),
        fmt::format("a file of at least {} bytes, found {}", out.data_offset, size));
  }
  uint64_t section = size - out.data_offset;
  for (auto& t : out.tensors) {
    if (t.offset > section || t.nbytes > section - t.offset) {
      c.set_tensor_name(t.name);
      c.fail_at(out.data_offset,
                fmt::format("tensor data [{}, {}) in the data section at offset {} runs past the "
                            "end of the file",
                            t.offset, t.offset > section ? t.offset : t.offset + t.nbytes,
                            out.data_offset),
                fmt::format("data within the {} bytes of the data section", section));
    }
    t.data = c.data() + out.data_offset + t.offset;
  }
  std::vector<size_t> order(out.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return out.tensors[x].offset < out.tensors[y].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = out.tensors[order[k - 1]];
    const TensorInfo& cur = out.tensors[order[k]];
    // Sorted by start and every tensor is nonempty: checking neighbours finds any overlap.
    if (cur.offset < prev.offset + prev.nbytes) {
      c.set_tensor_name(cur.name);
      c.fail_at(out.data_offset + cur.offset,
                fmt::format("tensor data [{}, {}) overlaps tensor '{}' at [{}, {})", cur.offset,
                            cur.offset + cur.nbytes, printable(prev.name), prev.offset,
                            prev.offset + prev.nbytes),
                "disjoint tensor data");
    }
  }
}

}  // namespace

ParsedGGUF parse_gguf(const uint8_t* data, size_t size, const std::string& name) {
  static const uint8_t kEmpty[1] = {0};
  Cursor c(data ? data : kEmpty, data ? size : 0, name);
  ParsedGGUF out;
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  read_header(c, out, n_tensors, n_kv);
  read_metadata(c, out, n_kv);
  read_tensor_infos(c, out, n_tensors);
  place_tensors(c, out);
  return out;
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

GGUFFile::GGUFFile(const std::string& path)
    : path_(path), file_(std::make_unique<MappedFile>(path)) {
  ParsedGGUF p = parse_gguf(file_->data(), file_->size(), path_);
  version_ = p.version;
  alignment_ = p.alignment;
  data_offset_ = p.data_offset;
  kv_ = std::move(p.kv);
  tensors_ = std::move(p.tensors);
  build_indexes();
}

void GGUFFile::build_indexes() {
  for (size_t i = 0; i < kv_.size(); ++i) kv_index_.emplace(kv_[i].first, i);
  for (size_t i = 0; i < tensors_.size(); ++i) tensor_index_.emplace(tensors_[i].name, i);
}

std::unique_ptr<GGUFFile> GGUFFile::from_parts(std::string name,
                                               std::vector<std::pair<std::string, Value>> kv,
                                               std::vector<TensorInfo> tensors,
                                               std::shared_ptr<const void> owner,
                                               uint64_t source_bytes) {
  std::unique_ptr<GGUFFile> f(new GGUFFile());
  std::unordered_set<std::string> seen;
  for (const auto& [key, v] : kv) {
    if (key.empty()) fail("{}: empty metadata key", name);
    if (!seen.insert(key).second) fail("{}: duplicate metadata key '{}'", name, key);
    const std::string bad = v.check_consistent();
    if (!bad.empty()) fail("{}: metadata key '{}': {}", name, key, bad);
  }
  seen.clear();
  uint64_t offset = 0;
  for (TensorInfo& t : tensors) {
    if (t.name.empty()) fail("{}: empty tensor name", name);
    if (!seen.insert(t.name).second) fail("{}: duplicate tensor name '{}'", name, t.name);
    if (t.shape.empty() || t.shape.size() > static_cast<size_t>(kMaxDims))
      fail("{}: tensor '{}' has {} dimensions, expected 1 to {}", name, t.name, t.shape.size(),
           kMaxDims);
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d <= 0 || n > std::numeric_limits<int64_t>::max() / d)
        fail("{}: tensor '{}' has a dimension {} (or an element count) out of range", name, t.name,
             d);
      n *= d;
    }
    const DTypeInfo& info = dtype_info(t.type);
    if (t.shape[0] % info.block_size != 0)
      fail("{}: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}", name, t.name,
           t.shape[0], info.name, info.block_size);
    const uint64_t want = static_cast<uint64_t>(n / info.block_size) * info.block_bytes;
    if (t.nbytes != want)
      fail("{}: tensor '{}' has {} bytes, expected {} for its shape and dtype {}", name, t.name,
           t.nbytes, want, info.name);
    if (t.data == nullptr) fail("{}: tensor '{}' has no data", name, t.name);
    t.offset = offset;  // where a GGUF writer would put it (default alignment)
    offset += (t.nbytes + kDefaultAlignment - 1) / kDefaultAlignment * kDefaultAlignment;
  }
  f->path_ = std::move(name);
  f->owner_ = std::move(owner);
  f->source_bytes_ = source_bytes;
  f->version_ = 3;
  f->alignment_ = kDefaultAlignment;
  f->kv_ = std::move(kv);
  f->tensors_ = std::move(tensors);
  f->build_indexes();
  return f;
}

uint64_t GGUFFile::file_size() const {
  return file_ ? file_->size() : source_bytes_;
}

const Value* GGUFFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* GGUFFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GGUFFile::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("{}: missing tensor '{}'", path_, name);
  return *t;
}

// ---- typed getters ----

namespace {

[[noreturn]] void type_mismatch(const std::string& path, std::string_view key, const Value& v,
                                std::string_view expected) {
  fail("{}: metadata key '{}' has type {}, expected {}", path, key, v.type_name(), expected);
}

// Runs a lenient Value accessor, prefixing its error with the file and key.
template <class F>
auto with_key(const std::string& path, std::string_view key, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    fail("{}: metadata key '{}': {}", path, key, e.what());
  }
}

const Array& array_of(const std::string& path, std::string_view key, const Value& v,
                      bool (*elem_ok)(ValueType), std::string_view expected) {
  const Array* a = std::get_if<Array>(&v.v);
  if (v.type != ValueType::ARRAY || !a || !elem_ok(a->elem_type)) {
    type_mismatch(path, key, v, expected);
  }
  return *a;
}

bool is_int_type(ValueType t) {
  return Value{t, uint64_t{0}}.is_integer();
}
bool is_number_type(ValueType t) {
  return is_int_type(t) || t == ValueType::FLOAT32 || t == ValueType::FLOAT64;
}
bool is_string_type(ValueType t) {
  return t == ValueType::STRING;
}

const Value& require(const GGUFFile& f, std::string_view key) {
  const Value* v = f.find(key);
  if (!v) fail("{}: missing metadata key '{}'", f.path(), key);
  return *v;
}

}  // namespace

std::string GGUFFile::get_string(std::string_view key) const {
  const Value* v = &require(*this, key);
  if (v->type != ValueType::STRING) type_mismatch(path_, key, *v, "string");
  return v->as_string();
}

std::string GGUFFile::get_string(std::string_view key, std::string def) const {
  if (!has(key)) return def;
  return get_string(key);
}

int64_t GGUFFile::get_int(std::string_view key) const {
  const Value* v = &require(*this, key);
  if (!v->is_integer()) type_mismatch(path_, key, *v, "an integer");
  return with_key(path_, key, [&] { return v->as_int(); });
}

int64_t GGUFFile::get_int(std::string_view key, int64_t def) const {
  if (!has(key)) return def;
  return get_int(key);
}

double GGUFFile::get_float(std::string_view key) const {
  const Value* v = &require(*this, key);
  if (!v->is_integer() && !v->is_float()) type_mismatch(path_, key, *v, "a number");
  return v->as_float();
}

double GGUFFile::get_float(std::string_view key, double def) const {
  if (!has(key)) return def;
  return get_float(key);
}

bool GGUFFile::get_bool(std::string_view key, bool def) const {
  const Value* v = find(key);
  if (!v) return def;
  if (v->type != ValueType::BOOL) type_mismatch(path_, key, *v, "bool");
  return v->as_bool();
}

std::vector<std::string> GGUFFile::get_string_array(std::string_view key) const {
  const Value* v = &require(*this, key);
  const Array& a = array_of(path_, key, *v, is_string_type, "array[string]");
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const Value& x : a.items) out.push_back(x.as_string());
  return out;
}

std::vector<float> GGUFFile::get_float_array(std::string_view key) const {
  const Value* v = &require(*this, key);
  const Array& a = array_of(path_, key, *v, is_number_type, "an array of numbers");
  std::vector<float> out;
  out.reserve(a.items.size());
  for (const Value& x : a.items) out.push_back(static_cast<float>(x.as_float()));
  return out;
}

std::vector<int64_t> GGUFFile::get_int_array(std::string_view key) const {
  const Value* v = &require(*this, key);
  const Array& a = array_of(path_, key, *v, is_int_type, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  with_key(path_, key, [&] {
    for (const Value& x : a.items) out.push_back(x.as_int());
    return 0;
  });
  return out;
}

}  // namespace kvasir::gguf
