// The elementwise parts of a lean decode step (trace_train/engine/lean_decode.py): RMSNorm, rotary embedding and
// SiLU times up, for a few rows of a few hundred to a few thousand values. A torch call of that size costs 15-40 us
// on a 2-core EPYC (dispatch, TensorIterator, allocation: RMSNorm alone 43 us for one row of 576) against ~1 us of
// arithmetic, and a 30-layer step makes ~150 of them. Each function follows the arithmetic of transformers' Llama
// modules, including where they round to the model's dtype (bf16: every product is rounded, as torch's bf16
// elementwise operations do); sums and exp may differ from torch's in the last bit (another summation order, a
// polynomial exp).

#include <ATen/OpMathType.h>
#include <torch/extension.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "simd.h"

namespace {

template <typename T>
inline float as_float(T v) {
  return static_cast<float>(v);
}

// round a float to T and back (bf16 rounds to nearest even; float is unchanged)
template <typename T>
inline float rounded(float v) {
  return static_cast<float>(static_cast<T>(v));
}

template <typename T>
float sum_of_squares(const T* x, int64_t n) {
  int64_t i = 0;
  float total = 0.0f;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, at::BFloat16>) {
    V acc = vzero();
    for (; i + W <= n; i += W) {
      const V v = vload(x + i);
      acc = vfma(v, v, acc);
    }
    total = vsum(acc);
  }
  for (; i < n; ++i) {
    const float v = as_float(x[i]);
    total += v * v;
  }
  return total;
}

// x * rsqrt(mean(x^2) + eps) in float32, cast to T, times the weight (in T's arithmetic)
template <typename T>
void rms_norm_rows(const T* x, const T* w, T* out, int64_t rows, int64_t n, double eps) {
  using acc_t = at::opmath_type<T>;  // float for bf16 and float, double for double
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = out + r * n;
    const float scale = 1.0f / std::sqrt(sum_of_squares(xr, n) / static_cast<float>(n) + static_cast<float>(eps));
    for (int64_t i = 0; i < n; ++i) {
      const T normed = static_cast<T>(static_cast<float>(as_float(xr[i]) * scale));
      yr[i] = static_cast<T>(static_cast<acc_t>(w[i]) * static_cast<acc_t>(normed));
    }
  }
}

// (x * cos) + (rotate_half(x) * sin) over the first `heads` heads of each row, in place; rotate_half(x) is
// cat(-x[half:], x[:half]). Each product and the sum rounded to T, as torch computes it.
template <typename T>
void rope_rows(T* x, int64_t row_stride, const T* cos, const T* sin, int64_t rows, int64_t heads, int64_t dim) {
  using acc_t = at::opmath_type<T>;
  const int64_t half = dim / 2;
  std::vector<T> head(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const T* c = cos + r * dim;
    const T* s = sin + r * dim;
    for (int64_t h = 0; h < heads; ++h) {
      T* xh = x + r * row_stride + h * dim;
      std::copy(xh, xh + dim, head.begin());
      for (int64_t j = 0; j < dim; ++j) {
        const acc_t rotated = j < half ? -static_cast<acc_t>(head[j + half]) : static_cast<acc_t>(head[j - half]);
        const T a = static_cast<T>(static_cast<acc_t>(head[j]) * static_cast<acc_t>(c[j]));
        const T b = static_cast<T>(rotated * static_cast<acc_t>(s[j]));
        xh[j] = static_cast<T>(static_cast<acc_t>(a) + static_cast<acc_t>(b));
      }
    }
  }
}

// silu(gate) * up for rows of [gate | up] (each `n` wide): silu rounded to T, then the product rounded to T
template <typename T>
void silu_mul_rows(const T* gate_up, int64_t row_stride, T* out, int64_t rows, int64_t n) {
  using acc_t = at::opmath_type<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = gate_up + r * row_stride;
    const T* u = g + n;
    T* y = out + r * n;
    int64_t i = 0;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, at::BFloat16>) {
      for (; i + W <= n; i += W) {
        const V x = vload(g + i);
        // exp(-x), its argument capped where the vector exp stays finite (x < -88: silu(x) ~ 0 either way)
        const V e = vexp(vmin(vsub(vzero(), x), vset(88.0f)));
        alignas(64) float xs[W], es[W];
        vstore(xs, x);
        vstore(es, e);
        for (int k = 0; k < W; ++k) {
          const float s = rounded<T>(xs[k] / (1.0f + es[k]));
          y[i + k] = static_cast<T>(s * as_float(u[i + k]));
        }
      }
    }
    for (; i < n; ++i) {
      const acc_t x = static_cast<acc_t>(g[i]);
      const T s = static_cast<T>(x / (acc_t(1) + std::exp(-x)));
      y[i] = static_cast<T>(static_cast<acc_t>(s) * static_cast<acc_t>(u[i]));
    }
  }
}

void check_rows(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 2 && t.stride(1) == 1, name, " must be a CPU matrix with contiguous rows");
}

}  // namespace

torch::Tensor lean_rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  check_rows(x, "x");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && weight.dim() == 1 && weight.size(0) == x.size(1) &&
                  weight.scalar_type() == x.scalar_type(),
              "weight must be a contiguous vector of x's width and dtype");
  auto out = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "lean_rms_norm", [&] {
    rms_norm_rows(x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.size(0),
                  x.size(1), eps);
  });
  return out;
}

void lean_rope_(torch::Tensor x, int64_t heads, int64_t dim, torch::Tensor cos, torch::Tensor sin) {
  check_rows(x, "x");
  TORCH_CHECK(dim % 2 == 0 && heads * dim <= x.size(1), "heads x dim must fit in a row, dim even");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.dim() == 2 && cos.sizes() == sin.sizes() &&
                  cos.size(0) == x.size(0) && cos.size(1) == dim && cos.scalar_type() == x.scalar_type() &&
                  sin.scalar_type() == x.scalar_type(),
              "cos and sin must be contiguous [rows, dim] of x's dtype");
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "lean_rope_", [&] {
    rope_rows(x.data_ptr<scalar_t>(), x.stride(0), cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>(), x.size(0),
              heads, dim);
  });
}

torch::Tensor lean_silu_mul(torch::Tensor gate_up) {
  check_rows(gate_up, "gate_up");
  TORCH_CHECK(gate_up.size(1) % 2 == 0, "gate_up must hold gate and up side by side");
  const int64_t n = gate_up.size(1) / 2;
  auto out = torch::empty({gate_up.size(0), n}, gate_up.options());
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, gate_up.scalar_type(), "lean_silu_mul", [&] {
    silu_mul_rows(gate_up.data_ptr<scalar_t>(), gate_up.stride(0), out.data_ptr<scalar_t>(), gate_up.size(0), n);
  });
  return out;
}
