// One decode step of grouped-query attention over a shared prefix and each row's own cached columns, streaming
// every key and value once (flash decoding on CPU). See trace_train/engine/decode_kernel.py for why and how it is
// built; the reference it must equal is the matmul path in trace_train/engine/attention.py (_with_prefix).
//
// For row b and K/V head h, the G query heads of h attend over [prefix columns | own columns of b]: scores in
// float32 from the stored dtype (bf16 or float32), an online softmax in float32 (running max and sum per query
// head), the values accumulated in float32, one rounding to the output dtype at the end. Masked own columns are
// skipped, not computed. Work items are (row, head, split of the columns); a row's splits are merged by their
// log-sum-exps, so a batch of one row still keeps every thread busy.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "simd.h"

namespace {

constexpr int BLOCK = 64;      // columns scored before their values are read (fits L1 with G <= 8)
constexpr int MAX_GROUPS = 8;  // query heads per K/V head
constexpr int MAX_DIM = 256;

// Columns of one (row, head): a base pointer and the stride between consecutive columns, in elements.
template <typename T>
struct Columns {
  const T* keys;
  const T* values;
  int64_t key_stride;
  int64_t value_stride;
};

// One item's queries (scaled, float32; and as stored, for the bf16 dot-product instruction) and its running
// softmax state per query head.
struct State {
  alignas(64) float q[MAX_GROUPS * MAX_DIM];
  alignas(64) uint16_t q16[MAX_GROUPS * MAX_DIM];
  float scale;
  float max[MAX_GROUPS];
  float sum[MAX_GROUPS];
  alignas(64) float acc[MAX_GROUPS][MAX_DIM];
};

// Score up to BLOCK listed columns and fold them into the state (`cols` indexes into `c`). GROUPS and CHUNKS
// (head dim / W) are compile-time for the common shapes, so the queries and the accumulators stay in registers;
// 0 means "read them at run time".
template <typename T, int GROUPS, int CHUNKS>
inline void block(const Columns<T>& c, const int64_t* cols, int n, int groups_rt, int dim, State& s) {
  const int groups = GROUPS ? GROUPS : groups_rt;
  const int chunks = CHUNKS ? CHUNKS : dim / W;
  alignas(64) float scores[MAX_GROUPS][BLOCK + W];
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<T, at::BFloat16> && GROUPS && CHUNKS == 4) {
    // bf16 keys: 32 bf16 products per instruction (vdpbf16ps, float32 sums), no conversion of the keys
    __m512i qq[GROUPS][2];
    for (int g = 0; g < GROUPS; ++g)
      for (int i = 0; i < 2; ++i) qq[g][i] = _mm512_loadu_si512(s.q16 + g * dim + i * 32);
    const V scale = vset(s.scale);
    for (int j = 0; j < n; ++j) {
      const uint16_t* k = reinterpret_cast<const uint16_t*>(c.keys + cols[j] * c.key_stride);
      const __m512i k0 = _mm512_loadu_si512(k), k1 = _mm512_loadu_si512(k + 32);
      if constexpr (GROUPS == 3 || GROUPS == 4) {  // four sums reduced together: half the shuffles of four
        V a[4];
        for (int g = 0; g < 4; ++g) {
          if (g >= GROUPS) {
            a[g] = vzero();
            continue;
          }
          a[g] = _mm512_dpbf16_ps(vzero(), (__m512bh)qq[g][0], (__m512bh)k0);
          a[g] = _mm512_dpbf16_ps(a[g], (__m512bh)qq[g][1], (__m512bh)k1);
        }
        float sums[4];
        _mm_storeu_ps(sums, sum4(a[0], a[1], a[2], a[3]));
        for (int g = 0; g < GROUPS; ++g) scores[g][j] = sums[g];
      } else {
        for (int g = 0; g < GROUPS; ++g) {
          V a = _mm512_dpbf16_ps(vzero(), (__m512bh)qq[g][0], (__m512bh)k0);
          a = _mm512_dpbf16_ps(a, (__m512bh)qq[g][1], (__m512bh)k1);
          scores[g][j] = vsum(a);
        }
      }
    }
    // scale after the sums: the bf16 queries are the model's own values, unrounded
    for (int g = 0; g < GROUPS; ++g)
      for (int j = 0; j < n; j += W) vstore(&scores[g][j], vmul(vload(&scores[g][j]), scale));
  } else
#endif
  {
    const float* q = s.q;
    for (int j = 0; j < n; ++j) {
      const T* k = c.keys + cols[j] * c.key_stride;
      V a[MAX_GROUPS];
      for (int g = 0; g < groups; ++g) a[g] = vzero();
      for (int i = 0; i < chunks; ++i) {
        const V kk = vload(k + i * W);
        for (int g = 0; g < groups; ++g) a[g] = vfma(vload(q + g * dim + i * W), kk, a[g]);
      }
      for (int g = 0; g < groups; ++g) scores[g][j] = vsum(a[g]);
    }
  }
  for (int g = 0; g < groups; ++g) {
    float m = s.max[g];
    for (int j = 0; j < n; ++j) m = std::max(m, scores[g][j]);
    const float alpha = std::exp(s.max[g] - m);  // 0 on the first block (max = -inf)
    s.max[g] = m;
    V total = vzero();
    int j = 0;
    for (; j + W <= n; j += W) {
      const V p = vexp(vsub(vload(&scores[g][j]), vset(m)));
      vstore(&scores[g][j], p);
      total = vadd(total, p);
    }
    float tail = 0.0f;
    for (; j < n; ++j) {
      scores[g][j] = std::exp(scores[g][j] - m);
      tail += scores[g][j];
    }
    s.sum[g] = s.sum[g] * alpha + vsum(total) + tail;
    if (alpha != 1.0f) {
      const V va = vset(alpha);
      for (int i = 0; i < chunks; ++i) vstore(&s.acc[g][i * W], vmul(vload(&s.acc[g][i * W]), va));
    }
  }
  constexpr int REG = GROUPS && CHUNKS ? GROUPS * CHUNKS : 1;
  if constexpr (GROUPS && CHUNKS && REG <= 16) {  // accumulators in registers for the whole block
    V acc[REG];
    for (int g = 0; g < GROUPS; ++g)
      for (int i = 0; i < CHUNKS; ++i) acc[g * CHUNKS + i] = vload(&s.acc[g][i * W]);
    for (int j = 0; j < n; ++j) {
      const T* v = c.values + cols[j] * c.value_stride;
      for (int i = 0; i < CHUNKS; ++i) {
        const V vv = vload(v + i * W);
        for (int g = 0; g < GROUPS; ++g) acc[g * CHUNKS + i] = vfma(vset(scores[g][j]), vv, acc[g * CHUNKS + i]);
      }
    }
    for (int g = 0; g < GROUPS; ++g)
      for (int i = 0; i < CHUNKS; ++i) vstore(&s.acc[g][i * W], acc[g * CHUNKS + i]);
  } else {
    for (int j = 0; j < n; ++j) {
      const T* v = c.values + cols[j] * c.value_stride;
      for (int i = 0; i < chunks; ++i) {
        const V vv = vload(v + i * W);
        for (int g = 0; g < groups; ++g)
          vstore(&s.acc[g][i * W], vfma(vset(scores[g][j]), vv, vload(&s.acc[g][i * W])));
      }
    }
  }
}

template <typename T>
void run(const torch::Tensor& query, const torch::Tensor& prefix_k, const torch::Tensor& prefix_v,
         const torch::Tensor& key, const torch::Tensor& value, const torch::Tensor& mask, double scale,
         torch::Tensor& partial, int64_t splits, int64_t out_splits, int64_t out_offset) {
  const int64_t rows = query.size(0), heads = query.size(1), groups = query.size(2), dim = query.size(3);
  const int64_t prefix = prefix_k.size(1), own = key.size(2), total = prefix + own;
  const int64_t mask_rows = mask.size(0);
  const T* q_ptr = query.data_ptr<T>();
  const T* pk = prefix_k.data_ptr<T>();
  const T* pv = prefix_v.data_ptr<T>();
  const T* k_ptr = key.data_ptr<T>();
  const T* v_ptr = value.data_ptr<T>();
  const bool* m_ptr = mask.data_ptr<bool>();
  float* out = partial.data_ptr<float>();
  const int64_t span = (total + splits - 1) / splits;
  const int64_t state_size = groups * (dim + 2);

  // SmolLM2's heads (3 query heads per K/V head of 64) get the compile-time kernel
  auto block_fn = &block<T, 0, 0>;
  if (groups == 3 && dim == 4 * W) block_fn = &block<T, 3, 4>;
  if (groups == 4 && dim == 4 * W) block_fn = &block<T, 4, 4>;
  if (groups == 2 && dim == 4 * W) block_fn = &block<T, 2, 4>;
  at::parallel_for(0, rows * heads * splits, 1, [&](int64_t begin, int64_t end) {
    State s;
    s.scale = static_cast<float>(scale);
    int64_t cols[BLOCK];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t split = item % splits, rh = item / splits, h = rh % heads, b = rh / heads;
      for (int g = 0; g < groups; ++g) {
        const T* qs = q_ptr + ((b * heads + h) * groups + g) * dim;
        for (int d = 0; d < dim; ++d) {
          s.q[g * dim + d] = static_cast<float>(qs[d]) * static_cast<float>(scale);
          s.q16[g * dim + d] = static_cast<at::BFloat16>(qs[d]).x;
        }
        s.max[g] = -std::numeric_limits<float>::infinity();
        s.sum[g] = 0.0f;
        std::fill(s.acc[g], s.acc[g] + dim, 0.0f);
      }
      const int64_t lo = split * span, hi = std::min(total, lo + span);
      // prefix columns [lo, min(hi, prefix)): contiguous, never masked
      if (lo < std::min(hi, prefix)) {
        const Columns<T> c{pk + h * prefix * dim, pv + h * prefix * dim, dim, dim};
        for (int64_t start = lo; start < std::min(hi, prefix); start += BLOCK) {
          const int n = static_cast<int>(std::min<int64_t>(BLOCK, std::min(hi, prefix) - start));
          for (int j = 0; j < n; ++j) cols[j] = start + j;
          block_fn(c, cols, n, groups, dim, s);
        }
      }
      // own columns [max(lo, prefix), hi) - prefix, the masked ones skipped
      if (std::max(lo, prefix) < hi) {
        const Columns<T> c{k_ptr + b * key.stride(0) + h * key.stride(1),
                           v_ptr + b * value.stride(0) + h * value.stride(1), key.stride(2), value.stride(2)};
        const bool* allowed = m_ptr + (mask_rows == 1 ? 0 : b) * own;
        int n = 0;
        for (int64_t col = std::max(lo, prefix) - prefix; col < hi - prefix; ++col) {
          cols[n] = col;  // branch-free: a random mask would mispredict
          n += allowed[col];
          if (n == BLOCK) {
            block_fn(c, cols, n, groups, dim, s);
            n = 0;
          }
        }
        if (n) block_fn(c, cols, n, groups, dim, s);
      }
      float* o = out + (rh * out_splits + out_offset + split) * state_size;
      for (int g = 0; g < groups; ++g) {
        o[g * (dim + 2)] = s.max[g];
        o[g * (dim + 2) + 1] = s.sum[g];
        std::copy(s.acc[g], s.acc[g] + dim, o + g * (dim + 2) + 2);
      }
    }
  });
}

// The shared prefix for every row at once: work items are (head, split of the prefix columns), and each block of
// PB columns is read once for all rows x groups queries of the head (the per-row kernel above reads the prefix
// once per row: 8 rows over a 3,400-token prefix read 1.25 GB a step in float32 instead of 157 MB). Per block
// the keys are transposed into float32 [dim][PB], so the scores of two queries x 4W columns are plain FMAs
// with the queries broadcast (no horizontal sums), then the online softmax per query and the values, read from
// the block in L1, added with each query's probabilities. Same numerics as the per-row kernel: float32 scores,
// softmax and sums, partial states merged by log-sum-exps; only the summation order differs.
constexpr int PB = 64;  // prefix columns per block: a multiple of 4W for every W (1, 8, 16)

template <int RT>
inline void prefix_scores(const float* q, const float* kt, float* sc, int dim) {
  // sc[RT][PB] = q[RT][dim] . kt[dim][PB], 4W columns at a time
  for (int c0 = 0; c0 < PB; c0 += 4 * W) {
    V acc[RT][4];
    for (int i = 0; i < RT; ++i)
      for (int c = 0; c < 4; ++c) acc[i][c] = vzero();
    for (int d = 0; d < dim; ++d) {
      const float* k = kt + d * PB + c0;
      const V k0 = vload(k), k1 = vload(k + W), k2 = vload(k + 2 * W), k3 = vload(k + 3 * W);
      for (int i = 0; i < RT; ++i) {
        const V qb = vset(q[i * dim + d]);
        acc[i][0] = vfma(qb, k0, acc[i][0]);
        acc[i][1] = vfma(qb, k1, acc[i][1]);
        acc[i][2] = vfma(qb, k2, acc[i][2]);
        acc[i][3] = vfma(qb, k3, acc[i][3]);
      }
    }
    for (int i = 0; i < RT; ++i)
      for (int c = 0; c < 4; ++c) vstore(sc + i * PB + c0 + c * W, acc[i][c]);
  }
}

template <int CH>
inline void prefix_values(const float* p, const float* vb, float* acc_out, int n, int dim) {
  // acc_out[dim] += sum_j p[j] * vb[j][dim]; CH = dim / W vectors in registers when known at compile time
  const int chunks = CH ? CH : dim / W;
  V acc[CH ? CH : MAX_DIM / W];
  for (int c = 0; c < chunks; ++c) acc[c] = vload(acc_out + c * W);
  for (int j = 0; j < n; ++j) {
    const V pj = vset(p[j]);
    const float* v = vb + j * dim;
    for (int c = 0; c < chunks; ++c) acc[c] = vfma(pj, vload(v + c * W), acc[c]);
  }
  for (int c = 0; c < chunks; ++c) vstore(acc_out + c * W, acc[c]);
}

template <typename T>
void run_prefix(const torch::Tensor& query, const torch::Tensor& prefix_k, const torch::Tensor& prefix_v,
                double scale, torch::Tensor& partial, int64_t splits, int64_t out_splits) {
  const int64_t rows = query.size(0), heads = query.size(1), groups = query.size(2), dim = query.size(3);
  const int64_t prefix = prefix_k.size(1), queries = rows * groups;
  const T* q_ptr = query.data_ptr<T>();
  const T* pk = prefix_k.data_ptr<T>();
  const T* pv = prefix_v.data_ptr<T>();
  float* out = partial.data_ptr<float>();
  const int64_t span = (prefix + splits - 1) / splits;
  const int64_t state_size = groups * (dim + 2);
  auto values_fn = &prefix_values<0>;
  if (dim == 4 * W) values_fn = &prefix_values<4>;
  if (dim == 8 * W) values_fn = &prefix_values<8>;
  at::parallel_for(0, heads * splits, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q(queries * dim), acc(queries * dim), sc(queries * PB), kt(dim * PB), vb(PB * dim);
    std::vector<float> mx(queries), sum(queries);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t h = item / splits, split = item % splits;
      const int64_t lo = split * span, hi = std::min(prefix, lo + span);
      for (int64_t b = 0; b < rows; ++b)
        for (int64_t g = 0; g < groups; ++g) {
          const T* qs = q_ptr + ((b * heads + h) * groups + g) * dim;
          for (int64_t d = 0; d < dim; ++d)
            q[(b * groups + g) * dim + d] = static_cast<float>(qs[d]) * static_cast<float>(scale);
        }
      std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
      std::fill(sum.begin(), sum.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      const T* keys = pk + h * prefix * dim;
      const T* vals = pv + h * prefix * dim;
      for (int64_t start = lo; start < hi; start += PB) {
        const int n = static_cast<int>(std::min<int64_t>(PB, hi - start));
        for (int j = 0; j < PB; ++j)
          for (int64_t d = 0; d < dim; ++d)
            kt[d * PB + j] = j < n ? static_cast<float>(keys[(start + j) * dim + d]) : 0.0f;
        const float* v_block;
        if constexpr (std::is_same_v<T, float>) {
          v_block = vals + start * dim;
        } else {
          for (int64_t i = 0; i < n * dim; ++i) vb[i] = static_cast<float>(vals[start * dim + i]);
          v_block = vb.data();
        }
        int64_t r = 0;
        for (; r + 2 <= queries; r += 2) prefix_scores<2>(&q[r * dim], kt.data(), &sc[r * PB], dim);
        if (r < queries) prefix_scores<1>(&q[r * dim], kt.data(), &sc[r * PB], dim);
        for (int64_t r2 = 0; r2 < queries; ++r2) {
          float* row = &sc[r2 * PB];
          float m = mx[r2];
          for (int j = 0; j < n; ++j) m = std::max(m, row[j]);
          const float alpha = std::exp(mx[r2] - m);  // 0 on the first block (max = -inf)
          mx[r2] = m;
          V total = vzero();
          for (int j = 0; j < PB; j += W) {
            const V pj = vexp(vsub(vload(row + j), vset(m)));
            vstore(row + j, pj);
          }
          for (int j = n; j < PB; ++j) row[j] = 0.0f;  // padding columns
          for (int j = 0; j < PB; j += W) total = vadd(total, vload(row + j));
          sum[r2] = sum[r2] * alpha + vsum(total);
          float* a = &acc[r2 * dim];
          if (alpha != 1.0f)
            for (int64_t d = 0; d < dim; ++d) a[d] *= alpha;
          values_fn(row, v_block, a, n, static_cast<int>(dim));
        }
      }
      for (int64_t b = 0; b < rows; ++b) {
        float* o = out + ((b * heads + h) * out_splits + split) * state_size;
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t r2 = b * groups + g;
          o[g * (dim + 2)] = mx[r2];
          o[g * (dim + 2) + 1] = sum[r2];
          std::copy(&acc[r2 * dim], &acc[r2 * dim] + dim, o + g * (dim + 2) + 2);
        }
      }
    }
  });
}

// Each (row, head, query head)'s splits merged by their log-sum-exps into the output, rounded once.
template <typename T>
void merge(const torch::Tensor& partial, torch::Tensor& out, int64_t splits) {
  const int64_t groups = out.size(2), dim = out.size(3), lines = out.numel() / dim;
  const float* p = partial.data_ptr<float>();
  T* o = out.data_ptr<T>();
  at::parallel_for(0, lines, 16, [&](int64_t begin, int64_t end) {
    float acc[MAX_DIM];
    for (int64_t line = begin; line < end; ++line) {
      const int64_t rh = line / groups, g = line % groups;
      const float* first = p + (rh * splits * groups + g) * (dim + 2);
      const int64_t step = groups * (dim + 2);
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < splits; ++s) top = std::max(top, first[s * step]);
      float total = 0.0f;
      std::fill(acc, acc + dim, 0.0f);
      if (top != -std::numeric_limits<float>::infinity()) {  // else no allowed column: zeros
        for (int64_t s = 0; s < splits; ++s) {
          const float* part = first + s * step;
          if (part[0] == -std::numeric_limits<float>::infinity()) continue;
          const float w = std::exp(part[0] - top);
          total += part[1] * w;
          for (int64_t d = 0; d < dim; ++d) acc[d] += part[2 + d] * w;
        }
      }
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
      for (int64_t d = 0; d < dim; ++d) o[line * dim + d] = static_cast<T>(acc[d] * inv);
    }
  });
}

// query [B, Hkv, G, D]; prefix_k/prefix_v [Hkv, P, D] contiguous (P may be 0); key/value [B, Hkv, T, D] with a
// unit last stride (a view of a longer cache is fine); mask [B or 1, T] bool. Returns [B, Hkv, G, D] in query's
// dtype.
torch::Tensor decode_attention(torch::Tensor query, torch::Tensor prefix_k, torch::Tensor prefix_v, torch::Tensor key,
                               torch::Tensor value, torch::Tensor mask, double scale, int64_t splits) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4 && prefix_k.dim() == 3 && mask.dim() == 2,
              "decode_attention: query/key/value must be 4-D, the prefix 3-D, the mask 2-D");
  const auto dtype = query.scalar_type();
  TORCH_CHECK(dtype == torch::kBFloat16 || dtype == torch::kFloat32, "decode_attention: bf16 or float32 only");
  for (const auto& t : {prefix_k, prefix_v, key, value})
    TORCH_CHECK(t.scalar_type() == dtype && t.device().is_cpu(), "decode_attention: one dtype, CPU tensors");
  TORCH_CHECK(mask.scalar_type() == torch::kBool && mask.is_contiguous(), "decode_attention: a contiguous bool mask");
  TORCH_CHECK(query.is_contiguous() && prefix_k.is_contiguous() && prefix_v.is_contiguous(),
              "decode_attention: query and prefix must be contiguous");
  TORCH_CHECK(key.stride(3) == 1 && value.stride(3) == 1, "decode_attention: key/value need a unit last stride");
  const int64_t rows = query.size(0), heads = query.size(1), groups = query.size(2), dim = query.size(3);
  TORCH_CHECK(groups <= MAX_GROUPS && dim <= MAX_DIM && dim % W == 0, "decode_attention: unsupported head shape");
  TORCH_CHECK(key.size(0) == rows && key.size(1) == heads && key.size(3) == dim && value.sizes() == key.sizes(),
              "decode_attention: key/value shape");
  TORCH_CHECK(prefix_k.size(0) == heads && prefix_k.size(2) == dim && prefix_v.sizes() == prefix_k.sizes(),
              "decode_attention: prefix shape");
  TORCH_CHECK((mask.size(0) == 1 || mask.size(0) == rows) && mask.size(1) == key.size(2),
              "decode_attention: mask shape");
  const int64_t prefix = prefix_k.size(1), own = key.size(2);
  auto out = torch::empty({rows, heads, groups, dim}, query.options());
  if (rows >= 2 && prefix >= PB) {
    // the prefix read once for all rows (run_prefix), each row's own columns by the per-row kernel; the two
    // sets of partial states are merged together
    const int64_t threads = at::get_num_threads();
    const int64_t prefix_splits =
        std::max<int64_t>(1, std::min<int64_t>((2 * threads + heads - 1) / heads, prefix / (4 * PB)));
    const int64_t own_splits = std::max<int64_t>(1, std::min<int64_t>(splits, own));
    const int64_t total_splits = prefix_splits + own_splits;
    auto partial = torch::empty({rows * heads * total_splits, groups, dim + 2}, query.options().dtype(torch::kFloat32));
    auto none_k = prefix_k.narrow(1, 0, 0), none_v = prefix_v.narrow(1, 0, 0);
    if (dtype == torch::kBFloat16) {
      run_prefix<at::BFloat16>(query, prefix_k, prefix_v, scale, partial, prefix_splits, total_splits);
      run<at::BFloat16>(query, none_k, none_v, key, value, mask, scale, partial, own_splits, total_splits,
                        prefix_splits);
      merge<at::BFloat16>(partial, out, total_splits);
    } else {
      run_prefix<float>(query, prefix_k, prefix_v, scale, partial, prefix_splits, total_splits);
      run<float>(query, none_k, none_v, key, value, mask, scale, partial, own_splits, total_splits, prefix_splits);
      merge<float>(partial, out, total_splits);
    }
    return out;
  }
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, prefix + own));
  auto partial = torch::empty({rows * heads * splits, groups, dim + 2}, query.options().dtype(torch::kFloat32));
  if (dtype == torch::kBFloat16) {
    run<at::BFloat16>(query, prefix_k, prefix_v, key, value, mask, scale, partial, splits, splits, 0);
    merge<at::BFloat16>(partial, out, splits);
  } else {
    run<float>(query, prefix_k, prefix_v, key, value, mask, scale, partial, splits, splits, 0);
    merge<float>(partial, out, splits);
  }
  return out;
}

}  // namespace

// prefill_attention.cpp
bool prefill_available();
std::vector<torch::Tensor> pack_kv(torch::Tensor key, torch::Tensor value);
std::vector<torch::Tensor> prefill_attention(torch::Tensor query, torch::Tensor kp, torch::Tensor vp, int64_t len,
                                             int64_t heads, torch::Tensor mask, int64_t mask_queries, double scale);
// attention_backward.cpp
std::vector<torch::Tensor> attention_backward(torch::Tensor query, torch::Tensor key, torch::Tensor value,
                                              torch::Tensor dout, torch::Tensor lse, torch::Tensor delta,
                                              int64_t heads, torch::Tensor mask, int64_t mask_queries,
                                              double scale);
// routed_lora.cpp
void routed_lora_update(torch::Tensor x, torch::Tensor a, torch::Tensor bt, torch::Tensor slots, torch::Tensor out,
                        int64_t rank);

// small_linear.cpp
torch::Tensor pack_small_linear(torch::Tensor weight);
torch::Tensor small_linear(torch::Tensor x, torch::Tensor packed, int64_t n, c10::optional<torch::Tensor> bias);
int64_t small_linear_width();
// lean_ops.cpp
torch::Tensor lean_rms_norm(torch::Tensor x, torch::Tensor weight, double eps);
void lean_rope_(torch::Tensor x, int64_t heads, int64_t dim, torch::Tensor cos, torch::Tensor sin);
torch::Tensor lean_silu_mul(torch::Tensor gate_up);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_attention", &decode_attention, "one decode step of GQA over a shared prefix and own columns");
  m.def("vector_width", []() { return W; }, "floats per vector register this build uses");
  m.def("prefill_available", &prefill_available, "whether this build has the bf16 prefill kernel (AVX-512 bf16)");
  m.def("pack_kv", &pack_kv, "keys and values packed in bf16 pairs for prefill_attention");
  m.def("prefill_attention", &prefill_attention, "attention of many queries over packed keys, with log-sum-exps");
  m.def("attention_backward", &attention_backward, "gradients of attention from its output's and its log-sum-exp");
  m.def("pack_small_linear", &pack_small_linear, "a float32 weight packed in panels for small_linear");
  m.def("small_linear", &small_linear, "a float32 linear of a few rows over a packed weight",
        py::arg("x"), py::arg("packed"), py::arg("n"), py::arg("bias") = py::none());
  m.def("small_linear_width", &small_linear_width, "outputs per panel of the packed weight");
  m.def("lean_rms_norm", &lean_rms_norm, "LlamaRMSNorm of a few rows");
  m.def("lean_rope_", &lean_rope_, "rotary embedding of a few rows' first heads, in place");
  m.def("lean_silu_mul", &lean_silu_mul, "silu(gate) * up of a few rows of [gate | up]");
  m.def("routed_lora_update", &routed_lora_update, "each token's own adapter's LoRA update, added in place");
}
