// Importance matrices: llama.cpp's per-column activation statistics of each weight matrix,
// which the importance-aware quantizers weight their rounding error by.
//
// Two file formats, told apart by content (a GGUF file starts with "GGUF"):
//  - GGUF (what the pinned llama-imatrix writes by default): metadata general.type = "imatrix",
//    imatrix.datasets (array of strings), imatrix.chunk_count and imatrix.chunk_size (uint32);
//    for every weight NAME two F32 tensors, NAME.in_sum2 of shape {cols, n_mat} (the sum over
//    the calibration tokens of each input column's squared activation; n_mat is the number of
//    experts, 1 for a dense matrix) and NAME.counts of shape {1, n_mat} (tokens seen by each).
//    The importance is in_sum2 / count per matrix, and 1 for a matrix that saw no token.
//  - legacy .dat: int32 n_entries; per entry int32 name length, the name, int32 ncall, int32
//    nval, nval floats (the mean squared activation times ncall); then optionally int32
//    chunk_count, int32 length and the dataset name. The importance is value / ncall (the
//    values as they are when ncall is 0).
// These are exactly what llama-quantize computes and hands to ggml_quantize_chunk.
//
// read_imatrix() refuses, naming the file and the entry: a file that is neither format, a GGUF
// one without the imatrix.* metadata (as llama-quantize does), no entries, a NAME.in_sum2
// without its NAME.counts or the other way round, tensors that are not F32, sums that do not
// split into the counts' matrices, truncated legacy files and any non-finite importance.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvasir {

// The raw statistics of one weight matrix (or one stack of expert matrices).
struct ImatrixStats {
  std::vector<double> sum_sq;   // n_mat * cols: sum of squared activations per input column
  std::vector<int64_t> counts;  // n_mat: tokens (rows of activations) seen by each matrix
};

struct Imatrix {
  std::string path;
  bool legacy = false;                // read from the .dat format
  std::vector<std::string> datasets;  // the calibration text(s)
  int chunk_count = 0;                // chunks of chunk_size tokens the statistics cover
  int chunk_size = 0;                 // 0 in legacy files
  // Weight name -> importance per input column (n_mat * cols values, matrix-major), as
  // llama-quantize passes them to the quantizers.
  std::map<std::string, std::vector<float>> importance;
  // The statistics as stored (legacy files: sum_sq = the stored values, counts = {ncall}).
  std::map<std::string, ImatrixStats> stats;
};

// Throws kvasir::Error (see above).
Imatrix read_imatrix(const std::string& path);

struct ImatrixMeta {
  std::vector<std::string> datasets;
  int chunk_count = 0;
  int chunk_size = 0;
};

// Writes `stats` as llama-imatrix does (entries by name; sums and counts stored as F32), so
// read_imatrix() and llama-quantize read back the same importance. Entries without counts are
// left out. Throws kvasir::Error on an inconsistent entry (sums not n_mat * cols) or I/O error.
void write_imatrix_gguf(const std::string& path, const std::map<std::string, ImatrixStats>& stats,
                        const ImatrixMeta& meta);
// The legacy format: values (sum / count) * ncall with ncall = ceil(max count / chunk_size)
// (chunk_size must be > 0), entries whose every count is 0 left out, a matrix without tokens
// stored as 1; the trailer holds chunk_count and the last dataset name.
void write_imatrix_dat(const std::string& path, const std::map<std::string, ImatrixStats>& stats,
                       const ImatrixMeta& meta);

}  // namespace kvasir
