// Prefill attention with bf16 dot products: softmax(q k^T * scale) v over one set of keys, with the log-sum-exp of
// every query, so that two calls (the shared prefix, then each row's own columns) merge into one softmax. See
// trace_train/engine/decode_kernel.py for why: torch's CPU flash attention computes bf16 at the float32 rate on a
// CPU without AMX, a fifth of what its bf16 dot products reach.
//
// Keys and values are first packed in pairs along the dimension the dot products run over (pack_kv): a key block
// of 32 keys as [dim/2][32] pairs of (k[2p], k[2p+1]), so one vdpbf16ps scores a query against 16 keys; a value
// block as [16][dim] pairs of (v[2k][d], v[2k+1][d]), so one vdpbf16ps adds 16 dims of two keys' values. A tile of
// 4 queries streams the packed blocks with an online softmax in float32 (running max and sum), probabilities
// rounded to bf16 for the value products (as flash attention does on GPUs), output rounded once.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "exp16.h"

bool prefill_available() {
#if defined(TRACE_EXP16)
  return true;
#else
  return false;
#endif
}

#if defined(TRACE_EXP16)
namespace {

constexpr int64_t DIM = 64;  // the head dim this kernel is built for (SmolLM2, Llama-style small models)
constexpr int64_t PAIRS = DIM / 2;
constexpr int64_t KB = 32;  // keys per block
constexpr int QB = 4;       // queries per tile
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();

inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

}  // namespace

// key/value [R, H, T, DIM] bf16 with a unit last stride -> packed keys [R*H, blocks, PAIRS, KB] and packed values
// [R*H, blocks, KB/2, DIM], as int32 pairs; keys past T are zeros.
std::vector<torch::Tensor> pack_kv(torch::Tensor key, torch::Tensor value) {
  TORCH_CHECK(key.dim() == 4 && value.sizes() == key.sizes(), "pack_kv: key/value must be [R, H, T, D], one shape");
  TORCH_CHECK(key.scalar_type() == torch::kBFloat16 && value.scalar_type() == torch::kBFloat16,
              "pack_kv: bf16 only");
  TORCH_CHECK(key.size(3) == DIM, "pack_kv: head dim must be 64");
  TORCH_CHECK(key.stride(3) == 1 && value.stride(3) == 1, "pack_kv: key/value need a unit last stride");
  const int64_t rows = key.size(0), heads = key.size(1), len = key.size(2), blocks = (len + KB - 1) / KB;
  auto opts = key.options().dtype(torch::kInt32);
  auto kp = torch::empty({rows * heads, blocks, PAIRS, KB}, opts);
  auto vp = torch::empty({rows * heads, blocks, KB / 2, DIM}, opts);
  const auto* k16 = reinterpret_cast<const uint16_t*>(key.data_ptr<at::BFloat16>());
  const auto* v16 = reinterpret_cast<const uint16_t*>(value.data_ptr<at::BFloat16>());
  auto* kout = reinterpret_cast<uint32_t*>(kp.data_ptr<int32_t>());
  auto* vout = reinterpret_cast<uint32_t*>(vp.data_ptr<int32_t>());
  at::parallel_for(0, rows * heads * blocks, 8, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / blocks, j = item % blocks, r = n / heads, h = n % heads;
      const uint16_t* kb = k16 + r * key.stride(0) + h * key.stride(1);
      const uint16_t* vb = v16 + r * value.stride(0) + h * value.stride(1);
      uint32_t* ko = kout + item * PAIRS * KB;
      uint32_t* vo = vout + item * (KB / 2) * DIM;
      for (int64_t k = 0; k < KB; ++k) {
        const int64_t t = j * KB + k;
        const uint32_t* row = t < len ? reinterpret_cast<const uint32_t*>(kb + t * key.stride(2)) : nullptr;
        for (int64_t p = 0; p < PAIRS; ++p) ko[p * KB + k] = row ? row[p] : 0u;
      }
      for (int64_t k = 0; k < KB / 2; ++k) {
        const int64_t t = j * KB + 2 * k;
        const uint16_t* a = t < len ? vb + t * value.stride(2) : nullptr;
        const uint16_t* b = t + 1 < len ? vb + (t + 1) * value.stride(2) : nullptr;
        for (int64_t d = 0; d < DIM; ++d)
          vo[k * DIM + d] = (a ? uint32_t(a[d]) : 0u) | ((b ? uint32_t(b[d]) : 0u) << 16);
      }
    }
  });
  return {kp, vp};
}

// query [N, M, DIM] bf16 contiguous, N = R*H rows of the packed keys; packed keys/values from pack_kv over `len`
// keys; mask: an empty tensor (every key allowed) or [R or 1, L, len] bool contiguous, query m of item n reading
// mask row (n / H, m % L). Returns out [N, M, DIM] bf16 and lse [N, M] float32 (-inf and zeros where a query has
// no allowed key).
std::vector<torch::Tensor> prefill_attention(torch::Tensor query, torch::Tensor kp, torch::Tensor vp, int64_t len,
                                             int64_t heads, torch::Tensor mask, int64_t mask_queries, double scale) {
  TORCH_CHECK(query.dim() == 3 && query.size(2) == DIM && query.scalar_type() == torch::kBFloat16 &&
                  query.is_contiguous(),
              "prefill_attention: query must be contiguous bf16 [N, M, 64]");
  const int64_t items = query.size(0), queries = query.size(1), blocks = (len + KB - 1) / KB;
  TORCH_CHECK(kp.dim() == 4 && kp.size(0) == items && kp.size(1) == blocks && kp.size(2) == PAIRS &&
                  kp.size(3) == KB && vp.size(0) == items && vp.size(1) == blocks,
              "prefill_attention: packed keys/values do not match the query rows or the key count");
  TORCH_CHECK(heads > 0 && items % heads == 0, "prefill_attention: query rows must be a multiple of the heads");
  const bool masked = mask.numel() > 0;
  if (masked) {
    TORCH_CHECK(mask.dim() == 3 && mask.scalar_type() == torch::kBool && mask.is_contiguous(),
                "prefill_attention: mask must be a contiguous bool [R or 1, L, T]");
    TORCH_CHECK((mask.size(0) == 1 || mask.size(0) == items / heads) && mask.size(1) == mask_queries &&
                    mask.size(2) == len && mask_queries > 0,
                "prefill_attention: mask shape");
  }
  auto out = torch::empty_like(query);
  auto lse = torch::empty({items, queries}, query.options().dtype(torch::kFloat32));
  const auto* q16 = reinterpret_cast<const uint32_t*>(query.data_ptr<at::BFloat16>());
  const auto* kbase = reinterpret_cast<const uint32_t*>(kp.data_ptr<int32_t>());
  const auto* vbase = reinterpret_cast<const uint32_t*>(vp.data_ptr<int32_t>());
  const bool* mbase = masked ? mask.data_ptr<bool>() : nullptr;
  const int64_t mask_rows = masked ? mask.size(0) : 0;
  auto* obase = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  float* lbase = lse.data_ptr<float>();
  const int64_t tiles = (queries + QB - 1) / QB;
  const __m512 vscale = _mm512_set1_ps(static_cast<float>(scale));
  const __m512 vneg = _mm512_set1_ps(NEG_INF);

  at::parallel_for(0, items * tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t work = begin; work < end; ++work) {
      const int64_t n = work / tiles, m0 = (work % tiles) * QB;
      const int live = static_cast<int>(std::min<int64_t>(QB, queries - m0));
      alignas(64) uint32_t q[QB][PAIRS];
      const bool* mrow[QB];
      for (int i = 0; i < QB; ++i) {
        for (int64_t p = 0; p < PAIRS; ++p) q[i][p] = i < live ? q16[(n * queries + m0 + i) * PAIRS + p] : 0u;
        mrow[i] = nullptr;
        if (masked && i < live)
          mrow[i] = mbase + ((mask_rows == 1 ? 0 : n / heads) * mask_queries + (m0 + i) % mask_queries) * len;
      }
      float run_max[QB], run_sum[QB];
      __m512 acc[QB][4];
      for (int i = 0; i < QB; ++i) {
        run_max[i] = NEG_INF;
        run_sum[i] = 0.0f;
        for (int d = 0; d < 4; ++d) acc[i][d] = _mm512_setzero_ps();
      }
      const uint32_t* kn = kbase + n * blocks * PAIRS * KB;
      const uint32_t* vn = vbase + n * blocks * (KB / 2) * DIM;
      for (int64_t j = 0; j < blocks; ++j) {
        // which of the block's keys each query may see: bit k of allow[i][half]
        __mmask16 allow[QB][2];
        bool any = false;
        const int64_t t0 = j * KB;
        for (int i = 0; i < QB; ++i)
          for (int half = 0; half < 2; ++half) {
            const int64_t s0 = t0 + half * 16;
            __mmask16 bits = 0;
            if (i < live && s0 < len) {
              const int64_t count = std::min<int64_t>(16, len - s0);
              if (!masked) {
                bits = count == 16 ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1);
              } else if (count == 16) {
                const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mrow[i] + s0));
                bits = _mm_test_epi8_mask(b, b);
              } else {
                for (int64_t k = 0; k < count; ++k) bits |= __mmask16(mrow[i][s0 + k] ? 1u << k : 0u);
              }
            }
            allow[i][half] = bits;
            any |= bits != 0;
          }
        if (!any) continue;
        // scores of 4 queries x 32 keys: per dimension pair, two key vectors and one broadcast query pair each
        __m512 s[QB][2];
        for (int i = 0; i < QB; ++i) s[i][0] = s[i][1] = _mm512_setzero_ps();
        const uint32_t* kj = kn + j * PAIRS * KB;
        for (int64_t p = 0; p < PAIRS; ++p) {
          const __m512i k0 = _mm512_loadu_si512(kj + p * KB), k1 = _mm512_loadu_si512(kj + p * KB + 16);
          for (int i = 0; i < QB; ++i) {
            const __m512i b = _mm512_set1_epi32(static_cast<int>(q[i][p]));
            s[i][0] = _mm512_dpbf16_ps(s[i][0], as_bh(b), as_bh(k0));
            s[i][1] = _mm512_dpbf16_ps(s[i][1], as_bh(b), as_bh(k1));
          }
        }
        alignas(64) uint32_t probs[QB][KB / 2];
        for (int i = 0; i < QB; ++i) {
          const __m512 a = _mm512_mask_blend_ps(allow[i][0], vneg, _mm512_mul_ps(s[i][0], vscale));
          const __m512 b = _mm512_mask_blend_ps(allow[i][1], vneg, _mm512_mul_ps(s[i][1], vscale));
          const float top = std::max(run_max[i], _mm512_reduce_max_ps(_mm512_max_ps(a, b)));
          if (top == NEG_INF) {  // nothing allowed yet for this query
            _mm512_storeu_si512(probs[i], _mm512_setzero_si512());
            continue;
          }
          const float corr = std::exp(run_max[i] - top);  // 0 on the first allowed block
          run_max[i] = top;
          const __m512 vc = _mm512_set1_ps(corr);
          for (int d = 0; d < 4; ++d) acc[i][d] = _mm512_mul_ps(acc[i][d], vc);
          const __m512 vt = _mm512_set1_ps(top);
          const __m512 pa = _mm512_maskz_mov_ps(allow[i][0], trace_exp16(_mm512_sub_ps(a, vt)));
          const __m512 pb = _mm512_maskz_mov_ps(allow[i][1], trace_exp16(_mm512_sub_ps(b, vt)));
          run_sum[i] = run_sum[i] * corr + _mm512_reduce_add_ps(_mm512_add_ps(pa, pb));
          _mm512_storeu_si512(probs[i], (__m512i)_mm512_cvtne2ps_pbh(pb, pa));  // keys 0-15 low, 16-31 high
        }
        // values: per pair of keys, four vectors of 16 dims, one broadcast probability pair per query
        const uint32_t* vj = vn + j * (KB / 2) * DIM;
        for (int64_t k = 0; k < KB / 2; ++k) {
          __m512i v[4];
          for (int d = 0; d < 4; ++d) v[d] = _mm512_loadu_si512(vj + k * DIM + d * 16);
          for (int i = 0; i < QB; ++i) {
            const __m512i b = _mm512_set1_epi32(static_cast<int>(probs[i][k]));
            for (int d = 0; d < 4; ++d) acc[i][d] = _mm512_dpbf16_ps(acc[i][d], as_bh(b), as_bh(v[d]));
          }
        }
      }
      for (int i = 0; i < live; ++i) {
        const int64_t m = n * queries + m0 + i;
        const float inv = run_sum[i] > 0.0f ? 1.0f / run_sum[i] : 0.0f;
        const __m512 vi = _mm512_set1_ps(inv);
        for (int d = 0; d < 4; ++d)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(obase + m * DIM + d * 16),
                              (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[i][d], vi)));
        lbase[m] = run_sum[i] > 0.0f ? run_max[i] + std::log(run_sum[i]) : NEG_INF;
      }
    }
  });
  return {out, lse};
}
#else
std::vector<torch::Tensor> pack_kv(torch::Tensor, torch::Tensor) {
  TORCH_CHECK(false, "pack_kv: this build has no AVX-512 bf16 (prefill_available() is false)");
}
std::vector<torch::Tensor> prefill_attention(torch::Tensor, torch::Tensor, torch::Tensor, int64_t, int64_t,
                                             torch::Tensor, int64_t, double) {
  TORCH_CHECK(false, "prefill_attention: this build has no AVX-512 bf16 (prefill_available() is false)");
}
#endif
