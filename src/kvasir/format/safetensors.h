// safetensors reader and writer (https://huggingface.co/docs/safetensors, the format Hugging Face
// checkpoints are stored in).
//
// Layout: an 8-byte little-endian header size N, N bytes of UTF-8 JSON (an object: tensor name ->
// {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__" object of
// string -> string), then the data section. Offsets are relative to the data section; shapes are
// row-major (shape[0] is the outermost dimension, the reverse of ggml's order).
//
// SafetensorsFile maps the file read-only and validates the header; tensor data is never copied:
// each TensorInfo points into the mapping (which the format does not align: read it with memcpy
// or through a byte view). Rejected with kvasir::Error naming the file, the tensor or key and
// what was expected: a file shorter than 8 bytes, a header size past the end of the file or above
// kMaxHeaderBytes, a header that does not start with '{', is not valid JSON (UTF-8 included) or
// not an object, or has trailing bytes other than JSON whitespace (writers pad with spaces),
// duplicate keys at any level, an empty tensor name, a tensor entry that is not an object with
// exactly those three keys, an unknown dtype, a shape that is not an array of non-negative
// integers (at most kMaxDims; 1.0 is not an integer; [] is a scalar), an element or byte count
// that overflows, data_offsets that are not two non-negative integers with begin <= end,
// end - begin different from the shape's byte count, offsets out of the data section, tensors
// that overlap or leave a hole (the data section must be covered exactly, as the reference
// implementation requires: sorted by begin, the first begins at 0, each where the previous
// ended, the last ends at the end of the file; a tensor with a 0 in its shape has begin == end),
// a __metadata__ that is not an object of string values. Messages read
// "<path>: <what> (tensor 't' | key 'k'): expected <...>". Parsing never reads outside the
// mapping and never recurses on the input's nesting.
//
// SafetensorsCheckpoint opens a model: a single .safetensors file, a folder holding
// model.safetensors, or a folder with model.safetensors.index.json ({"metadata": {...},
// "weight_map": {tensor: shard file}}; preferred when the folder has both) whose shards are
// opened and checked against it. Errors name the index file and the key: the index not JSON, not
// an object or without weight_map, a weight_map value that is not a string, a shard name that is
// not a plain file name in the folder ("../x.safetensors", "/abs", "a/b"), a missing shard file,
// a tensor the index names but its shard lacks, a shard that holds a tensor the index maps
// elsewhere or not at all, a tensor listed twice. The index's "metadata" is not interpreted.
//
// SafetensorsWriter builds a file and writes it atomically ("<path>.tmp" + rename; errors name
// the path). The header is compact JSON with keys in insertion order ("__metadata__" first when
// set), padded with spaces so the data section starts at a multiple of 8 bytes from the file
// start; tensors follow back to back in the order added, with no padding between them (the
// reader's exact-coverage rule forbids it), so a tensor's offset is 8-aligned only when the bytes
// before it add up to a multiple of 8. The writer refuses what the reader would: empty,
// duplicate, "__metadata__" or non-UTF-8 names, more than kMaxDims or negative dimensions, a
// byte count that differs from the shape's. write_sharded() splits tensors, in order, into shards
// of at most max_shard_bytes of tensor data (a tensor larger than that gets a shard of its own)
// named "model-00001-of-0000N.safetensors", each carrying the metadata, and writes
// model.safetensors.index.json beside them ({"metadata": {"total_size": bytes}, "weight_map"}).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvasir/util/mmap_file.h"

namespace kvasir::safetensors {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference implementation
constexpr int kMaxDims = 8;

// The format's dtypes of whole bytes per element; the model loader decides which it can use.
// Newer additions to the format (sub-byte F4/F6 types, F8_E8M0, complex) are refused as unknown.
enum class DType {
  BOOL,
  U8,
  I8,
  U16,
  I16,
  F16,
  BF16,
  U32,
  I32,
  F32,
  U64,
  I64,
  F64,
  F8_E4M3,
  F8_E5M2,
};
// The format's spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
size_t dtype_size(DType t);  // bytes per element
// Throws kvasir::Error for an unknown name (`where` prefixes the message).
DType parse_dtype(std::string_view name, std::string_view where);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major: shape[0] outermost
  uint64_t begin = 0;          // data_offsets, relative to the data section
  uint64_t end = 0;
  const uint8_t* data = nullptr;  // into the mapping (reader) or caller memory (writer)
  uint64_t nbytes() const { return end - begin; }
  int64_t n_elements() const;
};

struct ParsedSafetensors {
  uint64_t header_size = 0;                                   // N
  std::vector<std::pair<std::string, std::string>> metadata;  // __metadata__, in file order
  std::vector<TensorInfo> tensors;                            // in header order
};
// Parses an image held in memory (fuzzing, tests); `name` replaces the path in errors.
ParsedSafetensors parse_safetensors(const uint8_t* data, size_t size, const std::string& name);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_->size(); }
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws "<path>: missing tensor 'x'"

 private:
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

class SafetensorsCheckpoint {
 public:
  // `path`: a .safetensors file or a folder (see the header comment). Throws kvasir::Error.
  static SafetensorsCheckpoint open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // All tensors of all shards, shard by shard in index order, each shard's in header order.
  const std::vector<const TensorInfo*>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws naming the checkpoint
  // The shard file that holds `name` (for messages and `inspect`).
  const SafetensorsFile& shard_of(std::string_view name) const;
  uint64_t total_bytes() const;  // sum of the shard file sizes

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<const TensorInfo*> tensors_;
  std::map<std::string, std::pair<const TensorInfo*, size_t>, std::less<>> index_;
};

class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, std::string value);
  // `data` must stay valid until write(); nbytes must equal the shape's byte count.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                  const void* data, uint64_t nbytes);
  void add_tensor_copy(const std::string& name, DType dtype, std::vector<int64_t> shape,
                       std::vector<uint8_t> bytes);
  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;
  // Writes shards and model.safetensors.index.json into `folder` (created if missing). Returns
  // the shard file names.
  std::vector<std::string> write_sharded(const std::string& folder, uint64_t max_shard_bytes) const;

 private:
  std::vector<std::pair<std::string, std::string>> metadata_;
  struct Pending {
    TensorInfo info;
    std::shared_ptr<std::vector<uint8_t>> owned;
  };
  std::vector<Pending> tensors_;
};

}  // namespace kvasir::safetensors
