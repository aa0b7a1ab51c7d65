// The float vector the CPU kernels compute with, chosen at build time (-march=native): 16 floats (AVX-512), 8
// (AVX2 + FMA) or a plain float, with the few operations they need; loads widen bf16 to float32. Shared by
// decode_attention.cpp, small_linear.cpp and lean_ops.cpp.
#pragma once
#include <c10/util/BFloat16.h>

#include <cmath>

#include "exp16.h"

#if defined(__AVX512F__)
#include <immintrin.h>
namespace {
constexpr int W = 16;
using V = __m512;
inline V vzero() { return _mm512_setzero_ps(); }
inline V vset(float x) { return _mm512_set1_ps(x); }
inline V vload(const float* p) { return _mm512_loadu_ps(p); }
inline V vload(const at::BFloat16* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void vstore(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
inline V vmin(V a, V b) { return _mm512_min_ps(a, b); }
inline float vsum(V v) { return _mm512_reduce_add_ps(v); }
// the horizontal sums of four vectors, as one 4-lane vector
inline __m128 sum4(V a, V b, V c, V d) {
  const V ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // a0+a2 b0+b2 a1+a3 b1+b3 ..
  const V cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const V abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));  // a b c d per lane
  const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
}
inline V vexp(V x) { return trace_exp16(x); }  // exp16.h
}  // namespace
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
namespace {
constexpr int W = 8;
using V = __m256;
inline V vzero() { return _mm256_setzero_ps(); }
inline V vset(float x) { return _mm256_set1_ps(x); }
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
inline V vload(const at::BFloat16* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void vstore(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vmin(V a, V b) { return _mm256_min_ps(a, b); }
inline float vsum(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline V vexp(V x) {
  x = _mm256_max_ps(x, vset(-87.0f));
  V n = _mm256_round_ps(vmul(x, vset(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  V r = _mm256_fnmadd_ps(n, vset(0.693145752f), x);
  r = _mm256_fnmadd_ps(n, vset(1.42860677e-06f), r);
  V p = vset(1.0f / 720);
  p = vfma(p, r, vset(1.0f / 120));
  p = vfma(p, r, vset(1.0f / 24));
  p = vfma(p, r, vset(1.0f / 6));
  p = vfma(p, r, vset(0.5f));
  p = vfma(p, r, vset(1.0f));
  p = vfma(p, r, vset(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return vmul(p, _mm256_castsi256_ps(e));
}
}  // namespace
#else
namespace {
constexpr int W = 1;
using V = float;
inline V vzero() { return 0.0f; }
inline V vset(float x) { return x; }
inline V vload(const float* p) { return *p; }
inline V vload(const at::BFloat16* p) { return static_cast<float>(*p); }
inline void vstore(float* p, V v) { *p = v; }
inline V vfma(V a, V b, V c) { return a * b + c; }
inline V vmul(V a, V b) { return a * b; }
inline V vsub(V a, V b) { return a - b; }
inline V vadd(V a, V b) { return a + b; }
inline V vmin(V a, V b) { return a < b ? a : b; }
inline float vsum(V v) { return v; }
inline V vexp(V x) { return std::exp(x); }
}  // namespace
#endif
