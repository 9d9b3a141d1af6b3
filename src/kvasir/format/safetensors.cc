// safetensors parsing (parse_safetensors), the mapped SafetensorsFile, SafetensorsCheckpoint
// (single file, folder, sharded folder with an index) and SafetensorsWriter.
//
// The JSON header is read through nlohmann's SAX interface by a small state machine that knows
// the header's grammar (root object -> tensor entries -> shape / data_offsets arrays), so
// nothing of the input is kept but the tensor table: duplicate keys are seen as they arrive
// (nlohmann's DOM silently keeps the last one), a misplaced object or array is refused at its
// first byte, and the input's nesting never turns into recursion or memory. nlohmann's SAX
// parser is itself iterative and validates UTF-8. Every size computation is done in uint64
// with explicit overflow checks before anything is used.
#include "kvasir/format/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "kvasir/util/atomic_file.h"
#include "kvasir/util/error.h"
#include "kvasir/util/printable.h"

namespace kvasir::safetensors {

static_assert(std::endian::native == std::endian::little,
              "the safetensors reader assumes a little-endian host");

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";

struct DTypeRow {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},   {DType::I16, "I16", 2},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::U32, "U32", 4},         {DType::I32, "I32", 4},
    {DType::F32, "F32", 4},   {DType::U64, "U64", 8},         {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

const DTypeRow* dtype_row(DType t) {
  for (const DTypeRow& r : kDTypes) {
    if (r.type == t) return &r;
  }
  return nullptr;
}

const DTypeRow* dtype_row(std::string_view name) {
  for (const DTypeRow& r : kDTypes) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string dtype_names() {
  std::string s;
  for (const DTypeRow& r : kDTypes) {
    if (!s.empty()) s += ", ";
    s += r.name;
  }
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Element and byte counts of a shape, or an empty string naming what overflows.
struct Counts {
  uint64_t elements = 1;
  uint64_t bytes = 0;
  std::string overflow;
};
Counts counts_of(const std::vector<int64_t>& shape, size_t elem_size) {
  Counts c;
  constexpr uint64_t kMaxElements = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (int64_t d : shape) {
    uint64_t u = static_cast<uint64_t>(d);  // callers checked d >= 0
    if (u != 0 && c.elements > kMaxElements / u) {
      c.overflow = "element count";
      return c;
    }
    c.elements *= u;
  }
  if (elem_size != 0 && c.elements > std::numeric_limits<uint64_t>::max() / elem_size) {
    c.overflow = "byte count";
    return c;
  }
  c.bytes = c.elements * elem_size;
  return c;
}

// nlohmann's message, cut short: its "last read" part quotes the input, which may be huge.
std::string short_what(const std::exception& e) {
  std::string_view w = e.what();
  if (w.size() <= 240) return std::string(w);
  return fmt::format("{}...", w.substr(0, 240));
}

// ---- the header's SAX state machine ----

class HeaderParser final : public nlohmann::json_sax<json> {
 public:
  HeaderParser(const std::string& name, uint64_t data_bytes, ParsedSafetensors& out)
      : name_(name), data_bytes_(data_bytes), out_(out) {}

  bool done() const { return state_ == State::kDone; }

  bool null() override { return scalar("null"); }
  bool boolean(bool v) override { return scalar(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override {
    if (v >= 0) return number(static_cast<uint64_t>(v), fmt::format("{}", v));
    return scalar(fmt::format("{}", v));
  }
  bool number_unsigned(number_unsigned_t v) override { return number(v, fmt::format("{}", v)); }
  bool number_float(number_float_t, const string_t& raw) override {
    return scalar(printable(raw));  // e.g. 1.0, 1e3; cut short
  }
  bool string(string_t& v) override {
    if (state_ == State::kMetadata) {
      out_.metadata.emplace_back(std::move(key_), std::move(v));
      key_.clear();
      return true;
    }
    if (state_ == State::kEntry && field_ == Field::kDtype) {
      const DTypeRow* r = dtype_row(v);
      if (!r) {
        fail_here(fmt::format("unknown dtype '{}'", printable(v)),
                  fmt::format("one of {}", dtype_names()));
      }
      entry_.dtype = r->type;
      return true;
    }
    return scalar("a string");
  }
  bool binary(binary_t&) override { return scalar("binary data"); }

  bool start_object(std::size_t) override {
    switch (state_) {
      case State::kTop:
        state_ = State::kRoot;
        return true;
      case State::kRoot:
        if (key_ == kMetadataKey) {
          state_ = State::kMetadata;
          metadata_keys_.clear();
        } else {
          state_ = State::kEntry;
          entry_ = TensorInfo{};
          entry_.name = std::move(key_);
          key_.clear();
          fields_seen_ = 0;
          shape_seen_ = offsets_seen_ = 0;
        }
        return true;
      default:
        return scalar("an object");
    }
  }

  bool key(string_t& k) override {
    switch (state_) {
      case State::kRoot:
        if (k.empty()) fail_at_root("empty tensor name", "a non-empty name");
        if (!root_keys_.insert(k).second) {
          key_ = std::move(k);
          if (key_ == kMetadataKey) {
            fail_at_root("duplicate key '__metadata__'", "at most one __metadata__ object");
          }
          fail_here("duplicate tensor name", "each name once");
        }
        key_ = std::move(k);
        return true;
      case State::kMetadata:
        key_ = std::move(k);
        if (!metadata_keys_.insert(key_).second) {
          fail_here("duplicate __metadata__ key", "each key once");
        }
        return true;
      case State::kEntry: {
        Field f = k == "dtype"          ? Field::kDtype
                  : k == "shape"        ? Field::kShape
                  : k == "data_offsets" ? Field::kOffsets
                                        : Field::kNone;
        if (f == Field::kNone) {
          fail_here(fmt::format("unknown key '{}'", printable(k)),
                    "only dtype, shape and data_offsets");
        }
        unsigned bit = 1u << static_cast<unsigned>(f);
        if (fields_seen_ & bit) {
          fail_here(fmt::format("duplicate key '{}'", k),
                    "each of dtype, shape, data_offsets once");
        }
        fields_seen_ |= bit;
        field_ = f;
        return true;
      }
      default:
        fail_at_root("unexpected key", "a safetensors header");  // unreachable in valid JSON
    }
  }

  bool end_object() override {
    switch (state_) {
      case State::kRoot:
        state_ = State::kDone;
        return true;
      case State::kMetadata:
        state_ = State::kRoot;
        return true;
      case State::kEntry:
        finish_entry();
        state_ = State::kRoot;
        return true;
      default:
        fail_at_root("unexpected end of object", "a safetensors header");  // unreachable
    }
  }

  bool start_array(std::size_t) override {
    if (state_ == State::kEntry && field_ == Field::kShape) {
      state_ = State::kShape;
      return true;
    }
    if (state_ == State::kEntry && field_ == Field::kOffsets) {
      state_ = State::kOffsets;
      return true;
    }
    return scalar("an array");
  }

  bool end_array() override {
    if (state_ == State::kShape) {
      state_ = State::kEntry;
      return true;
    }
    if (state_ == State::kOffsets) {
      if (offsets_seen_ != 2) {
        fail_here(fmt::format("data_offsets has {} entries", offsets_seen_),
                  "two integers [begin, end]");
      }
      state_ = State::kEntry;
      return true;
    }
    fail_at_root("unexpected end of array", "a safetensors header");  // unreachable
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail("{}: header is not valid JSON: expected a JSON object ({})", name_, short_what(e));
  }

 private:
  enum class State { kTop, kRoot, kMetadata, kEntry, kShape, kOffsets, kDone };
  enum class Field : unsigned { kDtype, kShape, kOffsets, kNone };

  // "<name>: <what> (tensor 't' | key 'k'): expected <...>", the context taken from the state.
  [[noreturn]] void fail_here(std::string_view what, std::string_view expected) const {
    std::string ctx;
    switch (state_) {
      case State::kRoot:
        ctx = key_ == kMetadataKey ? "" : fmt::format(" (tensor '{}')", printable(key_));
        break;
      case State::kMetadata:
        ctx = fmt::format(" (key '{}')", printable(key_));
        break;
      case State::kEntry:
      case State::kShape:
      case State::kOffsets:
        ctx = fmt::format(" (tensor '{}')", printable(entry_.name));
        break;
      default:
        break;
    }
    fail("{}: {}{}: expected {}", name_, what, ctx, expected);
  }
  [[noreturn]] void fail_at_root(std::string_view what, std::string_view expected) const {
    fail("{}: {}: expected {}", name_, what, expected);
  }

  // A scalar, object or array where `seen` describes it: valid only where the grammar says.
  bool scalar(const std::string& seen) {
    switch (state_) {
      case State::kTop:
        fail_at_root(fmt::format("header is {}", seen), "a JSON object");
      case State::kRoot:
        if (key_ == kMetadataKey) {
          fail_at_root(fmt::format("__metadata__ is {}", seen), "an object of string -> string");
        }
        fail_here(fmt::format("tensor entry is {}", seen),
                  "an object with dtype, shape and data_offsets");
      case State::kMetadata:
        fail_here(fmt::format("__metadata__ value is {}", seen), "a string");
      case State::kEntry:
        switch (field_) {
          case Field::kDtype:
            fail_here(fmt::format("dtype is {}", seen), "a dtype name such as \"F32\"");
          case Field::kShape:
            fail_here(fmt::format("shape is {}", seen), "an array of non-negative integers");
          default:
            fail_here(fmt::format("data_offsets is {}", seen), "two integers [begin, end]");
        }
      case State::kShape:
        fail_here(fmt::format("shape[{}] is {}", shape_seen_, seen), "a non-negative integer");
      case State::kOffsets:
        fail_here(fmt::format("data_offsets[{}] is {}", offsets_seen_, seen),
                  "a non-negative integer");
      case State::kDone:
        break;
    }
    fail_at_root("unexpected value", "a safetensors header");  // unreachable in strict mode
  }

  bool number(uint64_t v, const std::string& text) {
    if (state_ == State::kShape) {
      if (shape_seen_ >= static_cast<size_t>(kMaxDims)) {
        fail_here(fmt::format("shape has more than {} dimensions", kMaxDims),
                  fmt::format("at most {}", kMaxDims));
      }
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_here(fmt::format("shape[{}] is {}", shape_seen_, text),
                  "a non-negative integer below 2^63");
      }
      entry_.shape.push_back(static_cast<int64_t>(v));
      ++shape_seen_;
      return true;
    }
    if (state_ == State::kOffsets) {
      if (offsets_seen_ >= 2) {
        fail_here("data_offsets has more than 2 entries", "two integers [begin, end]");
      }
      (offsets_seen_ == 0 ? entry_.begin : entry_.end) = v;
      ++offsets_seen_;
      return true;
    }
    return scalar(text);
  }

  void finish_entry() {
    for (Field f : {Field::kDtype, Field::kShape, Field::kOffsets}) {
      if (!(fields_seen_ & (1u << static_cast<unsigned>(f)))) {
        const char* k = f == Field::kDtype   ? "dtype"
                        : f == Field::kShape ? "shape"
                                             : "data_offsets";
        fail_here(fmt::format("missing key '{}'", k), "dtype, shape and data_offsets");
      }
    }
    const DTypeRow* r = dtype_row(entry_.dtype);
    Counts c = counts_of(entry_.shape, r->size);
    if (!c.overflow.empty()) {
      fail_here(fmt::format("{} of shape {} in {} overflows", c.overflow, shape_text(entry_.shape),
                            r->name),
                c.overflow == "element count" ? "at most 2^63-1 elements" : "at most 2^64-1 bytes");
    }
    const uint64_t b = entry_.begin, e = entry_.end;
    if (b > e)
      fail_here(fmt::format("data_offsets [{}, {}] have begin > end", b, e), "begin <= end");
    if (e - b != c.bytes) {
      fail_here(
          fmt::format("data_offsets [{}, {}] hold {} bytes", b, e, e - b),
          fmt::format("{} bytes for shape {} of {}", c.bytes, shape_text(entry_.shape), r->name));
    }
    if (e > data_bytes_) {
      fail_here(fmt::format("data_offsets [{}, {}] run past the end of the data section", b, e),
                fmt::format("end <= {} (the data section's size)", data_bytes_));
    }
    out_.tensors.push_back(std::move(entry_));
    entry_ = TensorInfo{};
  }

  const std::string& name_;
  const uint64_t data_bytes_;
  ParsedSafetensors& out_;
  State state_ = State::kTop;
  std::string key_;  // the root key (tensor name or __metadata__) or the metadata key
  std::unordered_set<std::string> root_keys_;
  std::unordered_set<std::string> metadata_keys_;
  TensorInfo entry_;
  Field field_ = Field::kNone;
  unsigned fields_seen_ = 0;
  size_t shape_seen_ = 0;
  size_t offsets_seen_ = 0;
};

// The data section must be covered exactly: sorted by (begin, end), each tensor begins where the
// previous one ended, the first at 0 and the last ends at the section's end.
void check_coverage(const std::string& name, const std::vector<TensorInfo>& tensors,
                    uint64_t data_bytes) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const TensorInfo& a = tensors[x];
    const TensorInfo& b = tensors[y];
    if (a.begin != b.begin) return a.begin < b.begin;
    return a.end != b.end ? a.end < b.end : x < y;  // ties in header order: stable messages
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (size_t i : order) {
    const TensorInfo& t = tensors[i];
    if (t.begin < pos) {
      fail(
          "{}: data [{}, {}) overlaps tensor '{}' at [{}, {}) (tensor '{}'): expected tensors "
          "that do not overlap",
          name, t.begin, t.end, printable(prev->name), prev->begin, prev->end, printable(t.name));
    }
    if (t.begin > pos) {
      fail(
          "{}: bytes [{}, {}) of the data section before this tensor belong to no tensor "
          "(tensor '{}'): expected tensors that cover the data section exactly",
          name, pos, t.begin, printable(t.name));
    }
    pos = t.end;
    prev = &t;
  }
  if (pos != data_bytes) {
    if (!prev) {
      fail(
          "{}: the data section holds {} bytes but the header lists no tensors: expected an "
          "empty data section",
          name, data_bytes);
    }
    fail(
        "{}: bytes [{}, {}) at the end of the data section belong to no tensor (after tensor "
        "'{}'): expected tensors that cover the data section exactly",
        name, pos, data_bytes, printable(prev->name));
  }
}

// ---- model.safetensors.index.json ----

struct Index {
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> shard, file order
};

class IndexParser final : public nlohmann::json_sax<json> {
 public:
  IndexParser(const std::string& name, Index& out) : name_(name), out_(out) {}

  bool saw_weight_map() const { return saw_weight_map_; }

  bool null() override { return scalar("null"); }
  bool boolean(bool v) override { return scalar(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override { return scalar(fmt::format("{}", v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(fmt::format("{}", v)); }
  bool number_float(number_float_t, const string_t& raw) override {
    return scalar(printable(raw));  // e.g. 1.0, 1e3; cut short
  }
  bool string(string_t& v) override {
    if (skip_ == 0 && state_ == State::kMap) {
      out_.weight_map.emplace_back(std::move(key_), std::move(v));
      key_.clear();
      return true;
    }
    return scalar("a string");
  }
  bool binary(binary_t&) override { return scalar("binary data"); }

  bool start_object(std::size_t) override {
    if (skip_ > 0 || (state_ == State::kRoot && !in_weight_map_key_)) return open_skipped();
    if (state_ == State::kTop) {
      state_ = State::kRoot;
      return true;
    }
    if (state_ == State::kRoot) {
      state_ = State::kMap;
      saw_weight_map_ = true;
      return true;
    }
    return scalar("an object");
  }
  bool start_array(std::size_t) override {
    if (skip_ > 0 || (state_ == State::kRoot && !in_weight_map_key_)) return open_skipped();
    return scalar("an array");
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    if (skip_ > 0) return true;
    if (state_ == State::kRoot) {
      if (!root_keys_.insert(k).second)
        fail("{}: duplicate key '{}': expected each key once", name_, printable(k));
      in_weight_map_key_ = k == "weight_map";
      return true;
    }
    // State::kMap
    if (!tensors_.insert(k).second) {
      fail("{}: tensor '{}' is listed twice in weight_map: expected each tensor in one shard",
           name_, printable(k));
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail("{}: not valid JSON ({})", name_, short_what(e));
  }

 private:
  enum class State { kTop, kRoot, kMap, kDone };

  bool open_skipped() {
    ++skip_;
    return true;
  }
  bool close() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    if (state_ == State::kMap) {
      state_ = State::kRoot;
      in_weight_map_key_ = false;
    } else {
      state_ = State::kDone;
    }
    return true;
  }
  bool scalar(const std::string& seen) {
    if (skip_ > 0) return true;
    switch (state_) {
      case State::kTop:
        fail("{}: the index is {}: expected a JSON object with a weight_map", name_, seen);
      case State::kRoot:
        if (in_weight_map_key_) {
          fail("{}: weight_map is {}: expected an object of tensor name -> shard file", name_,
               seen);
        }
        return true;  // another top-level key: not interpreted
      case State::kMap:
        fail("{}: weight_map value is {} (key '{}'): expected a shard file name (a string)", name_,
             seen, printable(key_));
      case State::kDone:
        break;
    }
    fail("{}: unexpected value: expected an index object", name_);  // unreachable
  }

  const std::string& name_;
  Index& out_;
  State state_ = State::kTop;
  int64_t skip_ = 0;  // depth inside a value that is not interpreted
  bool in_weight_map_key_ = false;
  bool saw_weight_map_ = false;
  std::string key_;
  std::unordered_set<std::string> root_keys_;
  std::unordered_set<std::string> tensors_;
};

Index read_index(const std::string& path) {
  MappedFile f(path);
  Index index;
  IndexParser parser(path, index);
  const char* p = reinterpret_cast<const char*>(f.data());
  static const char kEmpty[1] = {0};
  if (!p) p = kEmpty;
  if (const void* z = std::memchr(p, 0, f.size())) {  // see parse_safetensors
    fail("{}: not valid JSON (a NUL byte at offset {})", path, static_cast<const char*>(z) - p);
  }
  try {
    json::sax_parse(p, p + f.size(), &parser);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path, short_what(e));
  }
  if (!parser.saw_weight_map()) {
    fail("{}: missing key 'weight_map': expected an object of tensor name -> shard file", path);
  }
  return index;
}

// ---- writing ----

// JSON string literal of `s`; throws naming `what` when `s` is not valid UTF-8.
std::string quoted(const std::string& s, std::string_view what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    fail("SafetensorsWriter: {} '{}' is not valid UTF-8", what, printable(s));
  }
}

}  // namespace

// ---- dtypes ----

std::string_view dtype_name(DType t) {
  const DTypeRow* r = dtype_row(t);
  return r ? r->name : std::string_view("?");
}

size_t dtype_size(DType t) {
  const DTypeRow* r = dtype_row(t);
  return r ? r->size : 0;
}

DType parse_dtype(std::string_view name, std::string_view where) {
  const DTypeRow* r = dtype_row(name);
  if (!r) fail("{}: unknown dtype '{}': expected one of {}", where, printable(name), dtype_names());
  return r->type;
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- parsing ----

ParsedSafetensors parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
  if (!data || size < 8) {
    fail(
        "{}: file is {} bytes, too short for the 8-byte header size: expected a safetensors "
        "file",
        name, data ? size : 0);
  }
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  if (n > kMaxHeaderBytes) {
    fail("{}: header size {} is above the limit: expected at most {} bytes", name, n,
         kMaxHeaderBytes);
  }
  if (n > size - 8) {
    fail(
        "{}: header size {} runs past the end of the file: expected at most {} (the file is {} "
        "bytes)",
        name, n, size - 8, size);
  }
  const char* h = reinterpret_cast<const char*>(data + 8);
  if (n == 0 || h[0] != '{') {
    fail("{}: header does not start with '{{': expected a JSON object", name);
  }
  // nlohmann's lexer takes a NUL byte for the end of the input (and would ignore what follows);
  // JSON allows none outside strings and none raw inside them, so any NUL is an error.
  if (const void* z = std::memchr(h, 0, n)) {
    fail("{}: header holds a NUL byte at offset {}: expected JSON text (padded with spaces)", name,
         8 + (static_cast<const char*>(z) - h));
  }
  ParsedSafetensors out;
  out.header_size = n;
  const uint64_t data_start = 8 + n;
  const uint64_t data_bytes = size - data_start;
  HeaderParser parser(name, data_bytes, out);
  try {
    json::sax_parse(h, h + n, &parser);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: expected a JSON object ({})", name, short_what(e));
  }
  if (!parser.done()) fail("{}: header is not a complete JSON object", name);  // defensive
  check_coverage(name, out.tensors, data_bytes);
  for (TensorInfo& t : out.tensors) t.data = data + data_start + t.begin;
  return out;
}

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(std::make_unique<MappedFile>(path)) {
  ParsedSafetensors p = parse_safetensors(file_->data(), file_->size(), path_);
  metadata_ = std::move(p.metadata);
  tensors_ = std::move(p.tensors);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("{}: missing tensor '{}'", path_, printable(name));
  return *t;
}

// ---- SafetensorsCheckpoint ----

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint ck;
  ck.path_ = path;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    fail("{}: no such file or folder: expected a .safetensors file or a folder holding {} or {}",
         path, kSingleName, kIndexName);
  }
  if (!fs::is_directory(st)) {
    ck.shards_.push_back(std::make_unique<SafetensorsFile>(path));
  } else {
    const fs::path folder(path);
    const std::string index_path = (folder / kIndexName).string();
    const std::string single_path = (folder / kSingleName).string();
    if (fs::exists(index_path, ec)) {
      Index index = read_index(index_path);
      // Shards in order of first mention; each name a plain file in the folder.
      std::vector<std::string> shard_names;
      std::unordered_map<std::string, size_t> shard_of_name;
      std::unordered_map<std::string, size_t> tensor_shard;  // index's view
      for (const auto& [tensor, shard] : index.weight_map) {
        if (shard.empty() || shard == "." || shard == ".." ||
            shard.find('/') != std::string::npos || shard.find('\0') != std::string::npos) {
          fail(
              "{}: weight_map value '{}' is not a file name in the folder (key '{}'): expected "
              "a plain file name in {}",
              index_path, printable(shard), printable(tensor), path);
        }
        auto [it, added] = shard_of_name.emplace(shard, shard_names.size());
        if (added) {
          const std::string shard_path = (folder / shard).string();
          if (!fs::exists(shard_path, ec)) {
            fail("{}: shard '{}' does not exist (key '{}'): expected the file {}", index_path,
                 printable(shard), printable(tensor), shard_path);
          }
          shard_names.push_back(shard);
        }
        tensor_shard.emplace(tensor, it->second);
      }
      for (const std::string& s : shard_names) {
        ck.shards_.push_back(std::make_unique<SafetensorsFile>((folder / s).string()));
      }
      for (size_t i = 0; i < ck.shards_.size(); ++i) {
        const SafetensorsFile& f = *ck.shards_[i];
        for (const TensorInfo& t : f.tensors()) {
          auto it = tensor_shard.find(t.name);
          if (it == tensor_shard.end()) {
            fail(
                "{}: tensor '{}' is not in {}: expected every tensor of a shard listed in "
                "weight_map",
                f.path(), printable(t.name), index_path);
          }
          if (it->second != i) {
            fail(
                "{}: holds tensor '{}', which {} maps to '{}': expected each tensor in one "
                "shard",
                f.path(), printable(t.name), index_path, printable(shard_names[it->second]));
          }
        }
      }
      for (const auto& [tensor, shard] : index.weight_map) {
        const SafetensorsFile& f = *ck.shards_[shard_of_name.at(shard)];
        if (!f.find(tensor)) {
          fail(
              "{}: weight_map maps tensor '{}' to '{}', but {} has no such tensor (key '{}'): "
              "expected the shard to hold it",
              index_path, printable(tensor), printable(shard), f.path(), printable(tensor));
        }
      }
    } else if (fs::exists(single_path, ec)) {
      ck.shards_.push_back(std::make_unique<SafetensorsFile>(single_path));
    } else {
      fail("{}: no safetensors weights in the folder: expected {} or {}", path, kIndexName,
           kSingleName);
    }
  }
  for (size_t i = 0; i < ck.shards_.size(); ++i) {
    for (const TensorInfo& t : ck.shards_[i]->tensors()) {
      ck.tensors_.push_back(&t);
      ck.index_.emplace(t.name, std::make_pair(&t, i));
    }
  }
  return ck;
}

const TensorInfo* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.first;
}

const TensorInfo& SafetensorsCheckpoint::tensor(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("{}: missing tensor '{}'", path_, printable(name));
  return *t;
}

const SafetensorsFile& SafetensorsCheckpoint::shard_of(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: missing tensor '{}'", path_, printable(name));
  return *shards_[it->second.second];
}

uint64_t SafetensorsCheckpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->file_size();
  return n;
}

// ---- SafetensorsWriter ----

void SafetensorsWriter::set_metadata(const std::string& key, std::string value) {
  quoted(key, "metadata key");
  quoted(value, "metadata value");
  for (auto& kv : metadata_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void SafetensorsWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                   const void* data, uint64_t nbytes) {
  if (name.empty()) fail("SafetensorsWriter: empty tensor name");
  if (name == kMetadataKey) fail("SafetensorsWriter: a tensor cannot be named '__metadata__'");
  quoted(name, "tensor name");
  for (const auto& t : tensors_) {
    if (t.info.name == name) fail("SafetensorsWriter: duplicate tensor '{}'", printable(name));
  }
  const DTypeRow* r = dtype_row(dtype);
  if (!r) {
    fail("SafetensorsWriter: tensor '{}': unknown dtype {}", printable(name),
         static_cast<int>(dtype));
  }
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    fail("SafetensorsWriter: tensor '{}': {} dimensions, at most {} allowed", printable(name),
         shape.size(), kMaxDims);
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      fail("SafetensorsWriter: tensor '{}': shape[{}] = {}, expected >= 0", printable(name), d,
           shape[d]);
    }
  }
  Counts c = counts_of(shape, r->size);
  if (!c.overflow.empty()) {
    fail("SafetensorsWriter: tensor '{}': {} of shape {} overflows", printable(name), c.overflow,
         shape_text(shape));
  }
  if (nbytes != c.bytes) {
    fail("SafetensorsWriter: tensor '{}': {} bytes given, expected {} for shape {} of {}",
         printable(name), nbytes, c.bytes, shape_text(shape), r->name);
  }
  if (!data && nbytes) fail("SafetensorsWriter: tensor '{}': null data", printable(name));
  Pending p;
  p.info.name = name;
  p.info.dtype = dtype;
  p.info.shape = std::move(shape);
  p.info.end = nbytes;  // begin/end are assigned when the file is laid out
  p.info.data = static_cast<const uint8_t*>(data);
  tensors_.push_back(std::move(p));
}

void SafetensorsWriter::add_tensor_copy(const std::string& name, DType dtype,
                                        std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add_tensor(name, dtype, std::move(shape), owned->data(), owned->size());
  tensors_.back().owned = std::move(owned);
}

namespace {

// The padded header (without the 8-byte size) for tensors laid out back to back.
std::string header_json(const std::vector<std::pair<std::string, std::string>>& metadata,
                        const std::vector<TensorInfo>& tensors) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) h += ',';
      h += quoted(metadata[i].first, "metadata key");
      h += ':';
      h += quoted(metadata[i].second, "metadata value");
    }
    h += '}';
  }
  uint64_t offset = 0;
  for (const TensorInfo& t : tensors) {
    if (h.size() > 1) h += ',';
    const uint64_t n = t.nbytes();
    if (offset > std::numeric_limits<uint64_t>::max() - n) {
      fail("SafetensorsWriter: the data section overflows uint64 at tensor '{}'",
           printable(t.name));
    }
    h += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                     quoted(t.name, "tensor name"), dtype_name(t.dtype), fmt::join(t.shape, ","),
                     offset, offset + n);
    offset += n;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');  // 8 + N is then a multiple of 8
  return h;
}

template <class Sink>
void emit(Sink& s, const std::vector<std::pair<std::string, std::string>>& metadata,
          const std::vector<TensorInfo>& tensors) {
  const std::string h = header_json(metadata, tensors);
  const uint64_t n = h.size();
  s.put(&n, 8);
  s.put(h.data(), h.size());
  for (const TensorInfo& t : tensors) s.put(t.data, static_cast<size_t>(t.nbytes()));
}

struct VectorSink {
  std::vector<uint8_t>& out;
  void put(const void* p, size_t n) {
    size_t old = out.size();
    out.resize(old + n);
    if (n) std::memcpy(out.data() + old, p, n);
  }
};

}  // namespace

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  std::vector<TensorInfo> infos;
  infos.reserve(tensors_.size());
  for (const auto& t : tensors_) infos.push_back(t.info);
  std::vector<uint8_t> out;
  VectorSink sink{out};
  emit(sink, metadata_, infos);
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  std::vector<TensorInfo> infos;
  infos.reserve(tensors_.size());
  for (const auto& t : tensors_) infos.push_back(t.info);
  header_json(metadata_, infos);  // any error before the temp file exists
  write_file_atomically(path, [&](FileSink& sink) { emit(sink, metadata_, infos); });
}

std::vector<std::string> SafetensorsWriter::write_sharded(const std::string& folder,
                                                          uint64_t max_shard_bytes) const {
  if (max_shard_bytes == 0) fail("{}: max_shard_bytes must be > 0", folder);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) fail("{}: cannot create the folder: {}", folder, ec.message());

  // Greedy split in order: a shard closes when the next tensor would take it past the limit.
  std::vector<std::vector<size_t>> groups(1);
  uint64_t in_group = 0, total = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const uint64_t n = tensors_[i].info.nbytes();
    if (!groups.back().empty() && (in_group > max_shard_bytes || n > max_shard_bytes - in_group)) {
      groups.emplace_back();
      in_group = 0;
    }
    groups.back().push_back(i);
    in_group += n;
    total += n;
  }

  const size_t n_shards = groups.size();
  std::vector<std::string> names;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < n_shards; ++s) {
    names.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n_shards));
    SafetensorsWriter shard;
    shard.metadata_ = metadata_;
    for (size_t i : groups[s]) {
      shard.tensors_.push_back(tensors_[i]);
      weight_map[tensors_[i].info.name] = names.back();
    }
    shard.write((fs::path(folder) / names.back()).string());
  }
  nlohmann::ordered_json index = nlohmann::ordered_json::object();
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = std::move(weight_map);
  const std::string text = index.dump(2) + "\n";
  write_file_atomically((fs::path(folder) / kIndexName).string(),
                        [&](FileSink& sink) { sink.put(text.data(), text.size()); });
  return names;
}

}  // namespace kvasir::safetensors
