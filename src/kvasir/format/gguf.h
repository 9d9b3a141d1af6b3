// GGUF reader and writer (versions 2 and 3).
//
// GGUFFile maps the file read-only and parses the header, every metadata key/value (all value
// types, nested arrays included) and the tensor table. Tensor data is never copied: each
// TensorInfo points into the mapping. Any malformed input (bad magic, unsupported version,
// truncated header, string or array length past the end, absurd counts, unknown value type,
// unknown tensor dtype, tensor not a multiple of its block size, tensor data out of bounds or
// overlapping, bad alignment) throws kvasir::Error naming the file, the offending key or tensor
// and what was expected. The reader never reads out of the mapped range.
// Error messages read "<path>: <what> (key 'k' | tensor 't', at offset N): expected <...>".
// Also rejected: empty or duplicate keys and tensor names, bool bytes other than 0/1, arrays
// nested deeper than kMaxArrayDepth, general.alignment not a uint32 power of two, n_dims outside
// 1..kMaxDims, dimensions <= 0, element or byte counts that overflow, tensor offsets not a
// multiple of the alignment. Files without tensors may end before the data-section padding.
// Parsing is linear in the file size.
//
// GGUFWriter builds a file from metadata and tensors and writes it atomically (temp + rename).
// Tensor data is laid out as llama.cpp does (in order, each tensor padded to the alignment), so
// a llama.cpp-written file read and written back unchanged is byte-identical.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvasir/tensor/dtype.h"
#include "kvasir/util/mmap_file.h"

namespace kvasir::gguf {

constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;        // tensors have 1..kMaxDims dimensions
constexpr int kMaxArrayDepth = 8;  // levels of arrays in one value (a flat array is 1)
// The writer enforces llama.cpp's limit on tensor names (GGML_MAX_NAME - 1 bytes); the reader
// accepts longer names.
constexpr size_t kMaxTensorNameLength = 63;

enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Value;
struct Array {
  ValueType elem_type = ValueType::UINT8;
  std::vector<Value> items;

  friend bool operator==(const Array&, const Array&) = default;
};

// One metadata value. Integers of every width are held in int64/uint64 (by signedness),
// floats in double, so the original ValueType is kept in `type` for round-tripping.
struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

  static Value u8(uint8_t x) { return {ValueType::UINT8, uint64_t{x}}; }
  static Value i8(int8_t x) { return {ValueType::INT8, int64_t{x}}; }
  static Value u16(uint16_t x) { return {ValueType::UINT16, uint64_t{x}}; }
  static Value i16(int16_t x) { return {ValueType::INT16, int64_t{x}}; }
  static Value u32(uint32_t x) { return {ValueType::UINT32, uint64_t{x}}; }
  static Value i32(int32_t x) { return {ValueType::INT32, int64_t{x}}; }
  static Value u64(uint64_t x) { return {ValueType::UINT64, x}; }
  static Value i64(int64_t x) { return {ValueType::INT64, x}; }
  static Value f32(float x) { return {ValueType::FLOAT32, double{x}}; }
  static Value f64(double x) { return {ValueType::FLOAT64, x}; }
  static Value boolean(bool x) { return {ValueType::BOOL, x}; }
  static Value str(std::string s) { return {ValueType::STRING, std::move(s)}; }
  static Value array(ValueType elem, std::vector<Value> items) {
    return {ValueType::ARRAY, Array{elem, std::move(items)}};
  }
  static Value string_array(const std::vector<std::string>& xs);
  static Value f32_array(const std::vector<float>& xs);
  static Value i32_array(const std::vector<int32_t>& xs);

  // Lenient numeric accessors: any integer/float/bool value converts; others throw.
  int64_t as_int() const;
  uint64_t as_uint() const;
  double as_float() const;
  bool as_bool() const;
  const std::string& as_string() const;                // throws unless STRING
  const Array& as_array() const;                       // throws unless ARRAY
  std::string to_display(size_t max_items = 8) const;  // short human form for `kvasir inspect`

  bool is_integer() const;  // UINT8..INT64 (not BOOL)
  bool is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }
  // "uint32", "string", "array[float32]", "array[array[int8]]", ...
  std::string type_name() const;
  // Empty when `v` holds the alternative `type` calls for and the value fits that type
  // (e.g. a UINT8 holding 300 does not), recursively for arrays; else what is wrong.
  std::string check_consistent() const;

  // Exact equality (type, value, array contents); NaN compares unequal as usual.
  friend bool operator==(const Value&, const Value&) = default;
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // ggml order: shape[0] is the contiguous dimension
  uint64_t offset = 0;         // relative to the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (reader) or caller memory (writer)

  int64_t n_elements() const;
};

class GGUFFile {
 public:
  // Opens and validates `path`. Throws kvasir::Error on any problem.
  explicit GGUFFile(const std::string& path);
  // A file assembled in memory: another format seen as the GGUF file it converts to (a Hugging
  // Face folder, hf/hf_checkpoint.h). `name` stands for the path in messages; tensor data points
  // into memory `owner` keeps alive (mappings, converted copies); `source_bytes` is what
  // file_size() reports (the bytes of the files behind it). Checked as the reader checks a file:
  // duplicate or empty keys and tensor names, values of an inconsistent type, shapes (1..kMaxDims
  // dimensions, each > 0) and byte counts (nbytes = the dtype's size of the shape), null data.
  static std::unique_ptr<GGUFFile> from_parts(std::string name,
                                              std::vector<std::pair<std::string, Value>> kv,
                                              std::vector<TensorInfo> tensors,
                                              std::shared_ptr<const void> owner,
                                              uint64_t source_bytes);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const;
  // True for a file assembled by from_parts (no GGUF file on disk behind it).
  bool in_memory() const { return file_ == nullptr; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters; the ones without a default throw "<path>: missing metadata key '<key>'",
  // and all throw "<path>: metadata key '<key>' has type X, expected Y" on a type mismatch.
  // get_int and get_int_array accept any integer type (not bool or float); get_float and
  // get_float_array accept integers and floats; get_bool only BOOL; get_string only STRING.
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, std::string def) const;
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Throws "<path>: missing tensor '<name>'".
  const TensorInfo& tensor(std::string_view name) const;

 private:
  GGUFFile() = default;
  void build_indexes();

  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::shared_ptr<const void> owner_;  // from_parts
  uint64_t source_bytes_ = 0;          // from_parts
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Parses a GGUF image held in memory (used by the fuzz target and tests); `name` is used in
// error messages in place of a path. The returned tensors point into `data`.
struct ParsedGGUF {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;
  std::vector<std::pair<std::string, Value>> kv;
  std::vector<TensorInfo> tensors;
};
ParsedGGUF parse_gguf(const uint8_t* data, size_t size, const std::string& name);

class GGUFWriter {
 public:
  GGUFWriter() = default;

  // Sets (or replaces) a metadata key; insertion order is kept.
  void set(const std::string& key, Value v);
  // Adds a tensor; `data` must stay valid until write(). nbytes must equal row_bytes() * rows.
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> shape, const void* data,
                  uint64_t nbytes);
  // Adds a tensor whose bytes the writer owns.
  void add_tensor_copy(const std::string& name, DType type, std::vector<int64_t> shape,
                       std::vector<uint8_t> bytes);

  // Writes a version-3 file with the given alignment (general.alignment is written when it is
  // not 32). Writes to "<path>.tmp" then renames, so a failed write never leaves a half file.
  // If the caller set "general.alignment" its value is replaced by `alignment`.
  // Throws kvasir::Error naming the path on any I/O failure, or on a bad alignment.
  void write(const std::string& path, uint32_t alignment = 32) const;
  // The same bytes write() would produce, in memory (tests, fuzzing, small files).
  std::vector<uint8_t> serialize(uint32_t alignment = 32) const;

 private:
  std::vector<std::pair<std::string, Value>> kv_;
  struct Pending {
    TensorInfo info;
    std::shared_ptr<std::vector<uint8_t>> owned;
  };
  std::vector<Pending> tensors_;
};

}  // namespace kvasir::gguf
