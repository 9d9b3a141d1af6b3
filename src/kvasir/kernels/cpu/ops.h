// Element-wise and row-wise operations of the transformer forward pass, on the CPU.
// Each function processes n rows of `dim` floats (or n floats); all are SIMD (Highway) and
// per-row deterministic. Every operation takes the pool, as matmul does, and splits its rows over
// it when there is enough work (a few microseconds' worth: waking the pool costs about that);
// a row's result never depends on the split, nor on which thread computed it.
#pragma once

#include <cstdint>

#include "kvasir/util/thread_pool.h"

namespace kvasir::cpu {

// out[i] = x[i] / sqrt(mean(x²) + eps) * weight[i], per row. out may alias x.
void rms_norm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t dim,
              float eps, ThreadPool& pool);

// Rotary position embedding applied in place to n_rows rows of n_heads*head_dim floats, row t at
// position pos[t]. Only the first rope_dim dims of each head rotate (rope_dim <= head_dim).
// neox = false: pairs (2i, 2i+1) (llama "normal"); neox = true: pairs (i, i + rope_dim/2).
// inv_freq has rope_dim/2 entries: theta_i = pos * inv_freq[i] (llama3 scaling or other
// schemes are folded into inv_freq by the caller).
void rope(float* x, const int32_t* pos, int64_t n_rows, int n_heads, int head_dim, int rope_dim,
          const float* inv_freq, bool neox, ThreadPool& pool);

// out[i] = silu(gate[i]) * up[i], n elements. out may alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n, ThreadPool& pool);

// x[i] += y[i], n elements.
void add(float* x, const float* y, int64_t n, ThreadPool& pool);

// x[t][i] += bias[i] for each of n_rows rows of dim floats.
void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim, ThreadPool& pool);

// In-place softmax over n floats: max-subtracted float exp; the sum runs in float lanes over short
// blocks whose totals are added in double (accurate for vocabulary-sized rows).
void softmax(float* x, int64_t n);

}  // namespace kvasir::cpu
