// Float32 linears of a few rows (a decode step's matmuls: 1-16 rows against every weight of the model). The
// weight is packed once into panels of W outputs, k-major ([panels, K, W], zero padded past N), so that one
// vector load gives W outputs' weights for one input, and a register tile of MT rows x NB panels is summed with
// the rows' inputs broadcast: every weight is streamed from memory once per call, the MT x NB accumulators stay
// in registers over the whole K, and no horizontal sum is needed. See trace_train/engine/linears.py for why.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "simd.h"

namespace {
// a register tile of MT rows x NB panels: 16 of AVX-512's 32 registers; on AVX2 12 accumulators + 3 weights + 1
// broadcast, its 16
constexpr int MT = 4, NB = W == 8 ? 3 : 4;

// y[m0 .. m0+R) x panels [p0 .. p0+B) = x . packed, over the whole K; out-of-range outputs (the last panel's
// padding) are not stored.
template <int R, int B>
inline void tile(const float* x, int64_t k_len, const float* packed, int64_t p0, int64_t n, const float* bias,
                 float* y, int64_t y_stride) {
  V acc[R][B];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) acc[i][j] = vzero();
  const float* w = packed + p0 * k_len * W;
  for (int64_t k = 0; k < k_len; ++k) {
    V wv[B];
    for (int j = 0; j < B; ++j) wv[j] = vload(w + (j * k_len + k) * W);
    for (int i = 0; i < R; ++i) {
      const V xb = vset(x[i * k_len + k]);
      for (int j = 0; j < B; ++j) acc[i][j] = vfma(xb, wv[j], acc[i][j]);
    }
  }
  alignas(64) float line[W];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) {
      const int64_t col = (p0 + j) * W;
      vstore(line, acc[i][j]);
      const int64_t count = std::min<int64_t>(W, n - col);
      for (int64_t c = 0; c < count; ++c) y[i * y_stride + col + c] = line[c] + (bias ? bias[col + c] : 0.0f);
    }
}

template <int R>
inline void rows_tile(const float* x, int64_t k_len, const float* packed, int64_t p0, int64_t panels, int64_t n,
                      const float* bias, float* y, int64_t y_stride) {
  switch (panels) {
    case 1: tile<R, 1>(x, k_len, packed, p0, n, bias, y, y_stride); break;
    case 2: tile<R, 2 <= NB ? 2 : 1>(x, k_len, packed, p0, n, bias, y, y_stride); break;
    case 3: tile<R, 3 <= NB ? 3 : 1>(x, k_len, packed, p0, n, bias, y, y_stride); break;
    default: tile<R, NB>(x, k_len, packed, p0, n, bias, y, y_stride); break;
  }
}

}  // namespace

// weight [N, K] float32 -> [ceil(N / W), K, W], zero padded: the layout small_linear reads
torch::Tensor pack_small_linear(torch::Tensor weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat32 && weight.device().is_cpu(),
              "pack_small_linear: a 2-D float32 CPU weight");
  const int64_t n = weight.size(0), k = weight.size(1), panels = (n + W - 1) / W;
  auto padded = torch::zeros({panels * W, k}, weight.options());
  padded.narrow(0, 0, n).copy_(weight);
  return padded.view({panels, W, k}).transpose(1, 2).contiguous();
}

int64_t small_linear_width() { return W; }

// x [M, K] float32 contiguous, packed from pack_small_linear, n = the weight's N, bias [N] or undefined.
// Returns [M, N] float32.
torch::Tensor small_linear(torch::Tensor x, torch::Tensor packed, int64_t n, c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.device().is_cpu(),
              "small_linear: x must be a contiguous 2-D float32 CPU tensor");
  TORCH_CHECK(packed.dim() == 3 && packed.scalar_type() == torch::kFloat32 && packed.is_contiguous() &&
                  packed.size(2) == W && packed.size(1) == x.size(1) && packed.size(0) * W >= n &&
                  (packed.size(0) - 1) * W < n,
              "small_linear: packed weight of another shape (pack it with pack_small_linear)");
  const float* bp = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n && bias->scalar_type() == torch::kFloat32 &&
                    bias->is_contiguous(),
                "small_linear: bias must be a contiguous float32 [N]");
    bp = bias->data_ptr<float>();
  }
  const int64_t m = x.size(0), k = x.size(1), panels = packed.size(0);
  auto y = torch::empty({m, n}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t blocks = (panels + NB - 1) / NB;
  // each thread a contiguous run of panel blocks: its weights are streamed once for all rows
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t p0 = block * NB, count = std::min<int64_t>(NB, panels - p0);
      int64_t m0 = 0;
      for (; m0 + MT <= m; m0 += MT) rows_tile<MT>(xp + m0 * k, k, wp, p0, count, n, bp, yp + m0 * n, n);
      switch (m - m0) {
        case 3: rows_tile<3 <= MT ? 3 : 1>(xp + m0 * k, k, wp, p0, count, n, bp, yp + m0 * n, n); break;
        case 2: rows_tile<2>(xp + m0 * k, k, wp, p0, count, n, bp, yp + m0 * n, n); break;
        case 1: rows_tile<1>(xp + m0 * k, k, wp, p0, count, n, bp, yp + m0 * n, n); break;
        default: break;
      }
    }
  });
  return y;
}
