// The backward pass of attention with bf16 dot products, for training: given the forward's output O (through
// delta = rowsum(dO * O)) and log-sum-exp, the gradients of the queries, keys and values. torch's CPU flash
// backward computes bf16 at the float32 rate on a CPU without AMX (about 160 GFLOP/s on a 2-core EPYC); in a
// fine-tune over 5,000-token retail conversations it was half of every SFT and GRPO step.
//
// P = exp(q k^T * scale - lse) and dS = P * (dO v^T - delta) are recomputed per tile (nothing N x T is stored).
// Two passes, so that no two threads add into one gradient row:
//   keys pass:    a tile of 4 keys streams blocks of 32 queries: dV += P^T dO, dK += dS^T Q (times scale);
//   queries pass: a tile of 4 queries streams blocks of 32 keys:  dQ += dS K (times scale).
// Every product runs over bf16 pairs with vdpbf16ps (operands packed by pack_kv, prefill_attention.cpp); P and dS
// are rounded to bf16 for their products (as flash attention does on GPUs); accumulation and outputs are float32.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "exp16.h"

std::vector<torch::Tensor> pack_kv(torch::Tensor key, torch::Tensor value);  // prefill_attention.cpp

#if defined(TRACE_EXP16)
namespace {

constexpr int64_t DIM = 64;
constexpr int64_t PAIRS = DIM / 2;
constexpr int64_t BLOCK = 32;  // lanes of a packed block (keys in the queries pass, queries in the keys pass)
constexpr int TILE = 4;        // broadcast rows per tile
constexpr int64_t CHUNK = 16;  // tiles per work item, and blocks streamed while their operands stay in L2
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();

inline __m512bh bh(__m512i x) { return (__m512bh)x; }

// bits of the lanes [c0, c0 + 32) that `line` (a bool row of `count` entries, or nullptr: all allowed) allows,
// lane c of the block read at line[index(c)]: contiguous unless the block wraps past `period` (folded heads)
inline void lane_bits(const bool* line, int64_t c0, int64_t count, int64_t period, __mmask16 out[2]) {
  for (int half = 0; half < 2; ++half) {
    const int64_t s0 = c0 + half * 16;
    __mmask16 bits = 0;
    if (s0 < count) {
      const int64_t n = std::min<int64_t>(16, count - s0);
      if (line == nullptr) {
        bits = n == 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
      } else if (n == 16 && (s0 % period) + 16 <= period) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(line + s0 % period));
        bits = _mm_test_epi8_mask(b, b);
      } else {
        for (int64_t k = 0; k < n; ++k) bits |= __mmask16(line[(s0 + k) % period] ? 1u << k : 0u);
      }
    }
    out[half] = bits;
  }
}

inline __m512 load_lanes(const float* base, int64_t c0, int64_t count) {
  if (c0 + 16 <= count) return _mm512_loadu_ps(base + c0);
  if (c0 >= count) return _mm512_setzero_ps();
  return _mm512_maskz_loadu_ps(__mmask16((1u << (count - c0)) - 1), base + c0);
}

// exp(s * scale - lse) where allowed and lse is finite, else 0
inline __m512 probs(__m512 s, __m512 vscale, __m512 lse, __mmask16 allow) {
  const __mmask16 finite = _mm512_cmp_ps_mask(lse, _mm512_set1_ps(NEG_INF), _CMP_NEQ_OQ);
  return _mm512_maskz_mov_ps(allow & finite, trace_exp16(_mm512_sub_ps(_mm512_mul_ps(s, vscale), lse)));
}

// s[i] = a_i . x_lane and dp[i] = b_i . y_lane for a tile of broadcast rows a_i, b_i (bf16 pairs) against the
// 32 lanes of two packed blocks x, y ([PAIRS][32] pairs each): the scores and dP of either pass
inline void tile_products(const uint32_t (&a)[TILE][PAIRS], const uint32_t (&b)[TILE][PAIRS], const uint32_t* x,
                          const uint32_t* y, __m512 (&s)[TILE][2], __m512 (&dp)[TILE][2]) {
  for (int i = 0; i < TILE; ++i) s[i][0] = s[i][1] = dp[i][0] = dp[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < PAIRS; ++p) {
    const __m512i x0 = _mm512_loadu_si512(x + p * BLOCK), x1 = _mm512_loadu_si512(x + p * BLOCK + 16);
    const __m512i y0 = _mm512_loadu_si512(y + p * BLOCK), y1 = _mm512_loadu_si512(y + p * BLOCK + 16);
    for (int i = 0; i < TILE; ++i) {
      const __m512i ab = _mm512_set1_epi32(static_cast<int>(a[i][p]));
      const __m512i bb = _mm512_set1_epi32(static_cast<int>(b[i][p]));
      s[i][0] = _mm512_dpbf16_ps(s[i][0], bh(ab), bh(x0));
      s[i][1] = _mm512_dpbf16_ps(s[i][1], bh(ab), bh(x1));
      dp[i][0] = _mm512_dpbf16_ps(dp[i][0], bh(bb), bh(y0));
      dp[i][1] = _mm512_dpbf16_ps(dp[i][1], bh(bb), bh(y1));
    }
  }
}

}  // namespace

// query/dout [N, M, 64] bf16 contiguous; key/value [N, T, 64] bf16 (unit last stride); lse/delta [N, M] float32;
// mask: empty (every key allowed) or [R or 1, L, T] bool contiguous, query m of item n reading line (n / heads,
// m % L), as in prefill_attention. Returns dq [N, M, 64], dk and dv [N, T, 64], float32.
std::vector<torch::Tensor> attention_backward(torch::Tensor query, torch::Tensor key, torch::Tensor value,
                                              torch::Tensor dout, torch::Tensor lse, torch::Tensor delta,
                                              int64_t heads, torch::Tensor mask, int64_t mask_queries,
                                              double scale) {
  TORCH_CHECK(query.dim() == 3 && query.size(2) == DIM && query.scalar_type() == torch::kBFloat16 &&
                  query.is_contiguous() && dout.sizes() == query.sizes() &&
                  dout.scalar_type() == torch::kBFloat16 && dout.is_contiguous(),
              "attention_backward: query and dout must be contiguous bf16 [N, M, 64] of one shape");
  const int64_t items = query.size(0), queries = query.size(1);
  TORCH_CHECK(key.dim() == 3 && key.size(0) == items && key.size(2) == DIM && value.sizes() == key.sizes(),
              "attention_backward: key/value must be [N, T, 64] with the query's N");
  TORCH_CHECK(lse.sizes() == query.sizes().slice(0, 2) && delta.sizes() == lse.sizes() &&
                  lse.scalar_type() == torch::kFloat32 && delta.scalar_type() == torch::kFloat32 &&
                  lse.is_contiguous() && delta.is_contiguous(),
              "attention_backward: lse and delta must be contiguous float32 [N, M]");
  TORCH_CHECK(heads > 0 && items % heads == 0, "attention_backward: N must be a multiple of the heads");
  const int64_t len = key.size(1);
  const bool masked = mask.numel() > 0;
  if (masked) {
    TORCH_CHECK(mask.dim() == 3 && mask.scalar_type() == torch::kBool && mask.is_contiguous() &&
                    (mask.size(0) == 1 || mask.size(0) == items / heads) && mask.size(1) == mask_queries &&
                    mask.size(2) == len && mask_queries > 0,
                "attention_backward: mask must be a contiguous bool [R or 1, L, T]");
  }
  auto as4 = [](const torch::Tensor& t) { return t.unsqueeze(1); };
  const auto kk = pack_kv(as4(key), as4(key));      // keys as score operands (kk[0]) and as dQ's values (kk[1])
  const auto vv = pack_kv(as4(value), as4(value));  // values as dO v^T operands (vv[0])
  const auto qq = pack_kv(as4(query), as4(query));  // queries as key-pass score operands and as dK's values
  const auto oo = pack_kv(as4(dout), as4(dout));    // dout as key-pass dP operands and as dV's values
  const torch::Tensor mask_t = masked ? mask.transpose(1, 2).contiguous() : mask;  // [R|1, T, L]

  auto f32 = query.options().dtype(torch::kFloat32);
  auto dq = torch::empty({items, queries, DIM}, f32);
  auto dk = torch::empty({items, len, DIM}, f32);
  auto dv = torch::empty({items, len, DIM}, f32);
  const auto* q32 = reinterpret_cast<const uint32_t*>(query.data_ptr<at::BFloat16>());
  const auto* o32 = reinterpret_cast<const uint32_t*>(dout.data_ptr<at::BFloat16>());
  const auto* k16 = reinterpret_cast<const uint16_t*>(key.data_ptr<at::BFloat16>());
  const auto* v16 = reinterpret_cast<const uint16_t*>(value.data_ptr<at::BFloat16>());
  const float* lse_base = lse.data_ptr<float>();
  const float* delta_base = delta.data_ptr<float>();
  const bool* mbase = masked ? mask.data_ptr<bool>() : nullptr;
  const bool* mtbase = masked ? mask_t.data_ptr<bool>() : nullptr;
  const int64_t mask_rows = masked ? mask.size(0) : 0;
  const int64_t kblocks = (len + BLOCK - 1) / BLOCK, qblocks = (queries + BLOCK - 1) / BLOCK;
  const auto* kk_s = reinterpret_cast<const uint32_t*>(kk[0].data_ptr<int32_t>());
  const auto* kk_v = reinterpret_cast<const uint32_t*>(kk[1].data_ptr<int32_t>());
  const auto* vv_s = reinterpret_cast<const uint32_t*>(vv[0].data_ptr<int32_t>());
  const auto* qq_s = reinterpret_cast<const uint32_t*>(qq[0].data_ptr<int32_t>());
  const auto* qq_v = reinterpret_cast<const uint32_t*>(qq[1].data_ptr<int32_t>());
  const auto* oo_s = reinterpret_cast<const uint32_t*>(oo[0].data_ptr<int32_t>());
  const auto* oo_v = reinterpret_cast<const uint32_t*>(oo[1].data_ptr<int32_t>());
  float* dq_base = dq.data_ptr<float>();
  float* dk_base = dk.data_ptr<float>();
  float* dv_base = dv.data_ptr<float>();
  const __m512 vscale = _mm512_set1_ps(static_cast<float>(scale));
  const int64_t key_stride = key.stride(1), value_stride = value.stride(1);
  const int64_t key_item = key.stride(0), value_item = value.stride(0);

  // keys pass: dV and dK of a tile of 4 keys, over every query block
  // (CHUNK tiles a work item; the query blocks streamed CHUNK at a time, so that their packed operands are read
  // from L2 by every tile of the item: the whole query set of a folded prefix part is several MB)
  const int64_t ktiles = (len + TILE - 1) / TILE, kchunks = (ktiles + CHUNK - 1) / CHUNK;
  dk.zero_();
  dv.zero_();
  at::parallel_for(0, items * kchunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t work = begin; work < end; ++work) {
     const int64_t n = work / kchunks, first_tile = (work % kchunks) * CHUNK;
     const int64_t last_tile = std::min(ktiles, first_tile + CHUNK);
     for (int64_t b_from = 0; b_from < qblocks; b_from += CHUNK) {
      const int64_t b_to = std::min(qblocks, b_from + CHUNK);
      for (int64_t tile = first_tile; tile < last_tile; ++tile) {
      const int64_t t0 = tile * TILE;
      const int live = static_cast<int>(std::min<int64_t>(TILE, len - t0));
      alignas(64) uint32_t kr[TILE][PAIRS], vr[TILE][PAIRS];
      const bool* lines[TILE];
      for (int i = 0; i < TILE; ++i) {
        const auto* krow = reinterpret_cast<const uint32_t*>(k16 + n * key_item + (t0 + i) * key_stride);
        const auto* vrow = reinterpret_cast<const uint32_t*>(v16 + n * value_item + (t0 + i) * value_stride);
        for (int64_t p = 0; p < PAIRS; ++p) {
          kr[i][p] = i < live ? krow[p] : 0u;
          vr[i][p] = i < live ? vrow[p] : 0u;
        }
        lines[i] = masked && i < live
                       ? mtbase + ((mask_rows == 1 ? 0 : n / heads) * len + t0 + i) * mask_queries
                       : nullptr;
      }
      __m512 acc_v[TILE][4], acc_k[TILE][4];
      for (int i = 0; i < TILE; ++i)
        for (int d = 0; d < 4; ++d) {
          acc_v[i][d] = i < live ? _mm512_loadu_ps(dv_base + (n * len + t0 + i) * DIM + d * 16) : _mm512_setzero_ps();
          acc_k[i][d] = i < live ? _mm512_loadu_ps(dk_base + (n * len + t0 + i) * DIM + d * 16) : _mm512_setzero_ps();
        }
      for (int64_t b = b_from; b < b_to; ++b) {
        const int64_t m0 = b * BLOCK;
        __mmask16 allow[TILE][2];
        bool any = false;
        for (int i = 0; i < TILE; ++i) {
          if (i < live) {
            lane_bits(lines[i], m0, queries, masked ? mask_queries : queries + BLOCK, allow[i]);
          } else {
            allow[i][0] = allow[i][1] = 0;
          }
          any |= (allow[i][0] | allow[i][1]) != 0;
        }
        if (!any) continue;
        __m512 s[TILE][2], dp[TILE][2];
        tile_products(kr, vr, qq_s + (n * qblocks + b) * PAIRS * BLOCK, oo_s + (n * qblocks + b) * PAIRS * BLOCK, s,
                      dp);
        const float* lrow = lse_base + n * queries;
        const float* drow = delta_base + n * queries;
        const __m512 lse0 = load_lanes(lrow, m0, queries), lse1 = load_lanes(lrow, m0 + 16, queries);
        const __m512 del0 = load_lanes(drow, m0, queries), del1 = load_lanes(drow, m0 + 16, queries);
        alignas(64) uint32_t p_pairs[TILE][BLOCK / 2], ds_pairs[TILE][BLOCK / 2];
        for (int i = 0; i < TILE; ++i) {
          const __m512 pa = probs(s[i][0], vscale, lse0, allow[i][0]);
          const __m512 pb = probs(s[i][1], vscale, lse1, allow[i][1]);
          const __m512 da = _mm512_mul_ps(pa, _mm512_sub_ps(dp[i][0], del0));
          const __m512 db = _mm512_mul_ps(pb, _mm512_sub_ps(dp[i][1], del1));
          _mm512_storeu_si512(p_pairs[i], (__m512i)_mm512_cvtne2ps_pbh(pb, pa));
          _mm512_storeu_si512(ds_pairs[i], (__m512i)_mm512_cvtne2ps_pbh(db, da));
        }
        const uint32_t* ov = oo_v + (n * qblocks + b) * (BLOCK / 2) * DIM;
        const uint32_t* qv = qq_v + (n * qblocks + b) * (BLOCK / 2) * DIM;
        for (int64_t k = 0; k < BLOCK / 2; ++k) {
          __m512i o[4], q[4];
          for (int d = 0; d < 4; ++d) {
            o[d] = _mm512_loadu_si512(ov + k * DIM + d * 16);
            q[d] = _mm512_loadu_si512(qv + k * DIM + d * 16);
          }
          for (int i = 0; i < TILE; ++i) {
            const __m512i pbc = _mm512_set1_epi32(static_cast<int>(p_pairs[i][k]));
            const __m512i dbc = _mm512_set1_epi32(static_cast<int>(ds_pairs[i][k]));
            for (int d = 0; d < 4; ++d) {
              acc_v[i][d] = _mm512_dpbf16_ps(acc_v[i][d], bh(pbc), bh(o[d]));
              acc_k[i][d] = _mm512_dpbf16_ps(acc_k[i][d], bh(dbc), bh(q[d]));
            }
          }
        }
      }
      for (int i = 0; i < live; ++i) {
        float* dvr = dv_base + (n * len + t0 + i) * DIM;
        float* dkr = dk_base + (n * len + t0 + i) * DIM;
        for (int d = 0; d < 4; ++d) {
          _mm512_storeu_ps(dvr + d * 16, acc_v[i][d]);
          _mm512_storeu_ps(dkr + d * 16, acc_k[i][d]);
        }
      }
      }
     }
    }
  });
  dk.mul_(scale);

  // queries pass: dQ of a tile of 4 queries, over every key block
  const int64_t qtiles = (queries + TILE - 1) / TILE, qchunks = (qtiles + CHUNK - 1) / CHUNK;
  dq.zero_();
  at::parallel_for(0, items * qchunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t work = begin; work < end; ++work) {
     const int64_t n = work / qchunks, first_tile = (work % qchunks) * CHUNK;
     const int64_t last_tile = std::min(qtiles, first_tile + CHUNK);
     for (int64_t j_from = 0; j_from < kblocks; j_from += CHUNK) {
      const int64_t j_to = std::min(kblocks, j_from + CHUNK);
      for (int64_t tile = first_tile; tile < last_tile; ++tile) {
      const int64_t m0 = tile * TILE;
      const int live = static_cast<int>(std::min<int64_t>(TILE, queries - m0));
      alignas(64) uint32_t qr[TILE][PAIRS], orow[TILE][PAIRS];
      const bool* lines[TILE];
      float lse_i[TILE], delta_i[TILE];
      for (int i = 0; i < TILE; ++i) {
        const int64_t m = n * queries + m0 + i;
        for (int64_t p = 0; p < PAIRS; ++p) {
          qr[i][p] = i < live ? q32[m * PAIRS + p] : 0u;
          orow[i][p] = i < live ? o32[m * PAIRS + p] : 0u;
        }
        lse_i[i] = i < live ? lse_base[m] : NEG_INF;
        delta_i[i] = i < live ? delta_base[m] : 0.0f;
        lines[i] = masked && i < live
                       ? mbase + ((mask_rows == 1 ? 0 : n / heads) * mask_queries + (m0 + i) % mask_queries) * len
                       : nullptr;
      }
      __m512 acc[TILE][4];
      for (int i = 0; i < TILE; ++i)
        for (int d = 0; d < 4; ++d)
          acc[i][d] = i < live ? _mm512_loadu_ps(dq_base + (n * queries + m0 + i) * DIM + d * 16) : _mm512_setzero_ps();
      for (int64_t j = j_from; j < j_to; ++j) {
        const int64_t t0 = j * BLOCK;
        __mmask16 allow[TILE][2];
        bool any = false;
        for (int i = 0; i < TILE; ++i) {
          if (i < live && lse_i[i] != NEG_INF) {
            lane_bits(lines[i], t0, len, len + BLOCK, allow[i]);
          } else {
            allow[i][0] = allow[i][1] = 0;
          }
          any |= (allow[i][0] | allow[i][1]) != 0;
        }
        if (!any) continue;
        __m512 s[TILE][2], dp[TILE][2];
        tile_products(qr, orow, kk_s + (n * kblocks + j) * PAIRS * BLOCK, vv_s + (n * kblocks + j) * PAIRS * BLOCK,
                      s, dp);
        alignas(64) uint32_t ds_pairs[TILE][BLOCK / 2];
        for (int i = 0; i < TILE; ++i) {
          const __m512 vl = _mm512_set1_ps(lse_i[i]), vd = _mm512_set1_ps(delta_i[i]);
          const __m512 pa = probs(s[i][0], vscale, vl, allow[i][0]);
          const __m512 pb = probs(s[i][1], vscale, vl, allow[i][1]);
          const __m512 da = _mm512_mul_ps(pa, _mm512_sub_ps(dp[i][0], vd));
          const __m512 db = _mm512_mul_ps(pb, _mm512_sub_ps(dp[i][1], vd));
          _mm512_storeu_si512(ds_pairs[i], (__m512i)_mm512_cvtne2ps_pbh(db, da));
        }
        const uint32_t* kv = kk_v + (n * kblocks + j) * (BLOCK / 2) * DIM;
        for (int64_t k = 0; k < BLOCK / 2; ++k) {
          __m512i kr[4];
          for (int d = 0; d < 4; ++d) kr[d] = _mm512_loadu_si512(kv + k * DIM + d * 16);
          for (int i = 0; i < TILE; ++i) {
            const __m512i dbc = _mm512_set1_epi32(static_cast<int>(ds_pairs[i][k]));
            for (int d = 0; d < 4; ++d) acc[i][d] = _mm512_dpbf16_ps(acc[i][d], bh(dbc), bh(kr[d]));
          }
        }
      }
      for (int i = 0; i < live; ++i) {
        float* row = dq_base + (n * queries + m0 + i) * DIM;
        for (int d = 0; d < 4; ++d) _mm512_storeu_ps(row + d * 16, acc[i][d]);
      }
      }
     }
    }
  });
  dq.mul_(scale);
  return {dq, dk, dv};
}
#else
std::vector<torch::Tensor> attention_backward(torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor,
                                              torch::Tensor, torch::Tensor, int64_t, torch::Tensor, int64_t,
                                              double) {
  TORCH_CHECK(false, "attention_backward: this build has no AVX-512 bf16 (prefill_available() is false)");
}
#endif
