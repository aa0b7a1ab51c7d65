// The composed model's per-token LoRA update at decode sizes (trace_train/compose/model.py, RoutedLoRALinear):
// each token adds only its own adapter's B A x, instead of every adapter's factors for every token masked to its
// own block (four small matmuls a linear, a quarter of whose work is kept with four adapters). The update is
// computed in float32 and added to the base output with one rounding.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

template <typename T>
inline float as_float(T v) {
  return static_cast<float>(v);
}

// out[t] += bt[block(t)]^T (a[block(t)] x[t]) for each token t whose slot is >= 1 (block k - 1 of slot k).
// Tokens are taken slot by slot, so that the tokens of one adapter read its factors while they are in cache, and
// both products keep their accumulators in registers: four rows of A per pass over x[t] (four independent sums,
// x read once for them), and CHUNK outputs of B^T h summed over the whole rank before they are stored.
template <typename T>
void update(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& bt, const int64_t* sp,
            int64_t adapters, torch::Tensor& out, int64_t rank) {
  const int64_t tokens = x.size(0), in = x.size(1), outs = out.size(1);
  const T* xp = x.data_ptr<T>();
  const T* ap = a.data_ptr<T>();
  const T* bp = bt.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const int64_t out_stride = out.stride(0);
  std::vector<int64_t> order;  // the tokens with an adapter, grouped by slot
  order.reserve(tokens);
  for (int64_t slot = 1; slot <= adapters; ++slot)
    for (int64_t t = 0; t < tokens; ++t)
      if (sp[t] == slot) order.push_back(t);
  const int64_t n = static_cast<int64_t>(order.size());
  if (n == 0) return;
  // the low-rank activations, float32: h[t][j] = a[block(t) * rank + j] . x[t]
  std::vector<float> h(tokens * rank, 0.0f);
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t t = order[k];
      const T* xt = xp + t * in;
      const T* block = ap + (sp[t] - 1) * rank * in;
      float* ht = h.data() + t * rank;
      int64_t j = 0;
      for (; j + 4 <= rank; j += 4) {
        const T *r0 = block + j * in, *r1 = r0 + in, *r2 = r1 + in, *r3 = r2 + in;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t i = 0; i < in; ++i) {
          const float xv = as_float(xt[i]);
          s0 += as_float(r0[i]) * xv;
          s1 += as_float(r1[i]) * xv;
          s2 += as_float(r2[i]) * xv;
          s3 += as_float(r3[i]) * xv;
        }
        ht[j] = s0;
        ht[j + 1] = s1;
        ht[j + 2] = s2;
        ht[j + 3] = s3;
      }
      for (; j < rank; ++j) {
        const T* row = block + j * in;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < in; ++i) acc += as_float(row[i]) * as_float(xt[i]);
        ht[j] = acc;
      }
    }
  });
  constexpr int64_t CHUNK = 64;  // outputs per work item: their sums stay in registers over the rank
  const int64_t chunks = (outs + CHUNK - 1) / CHUNK;
  // chunk-major, tokens by slot within a chunk: consecutive items read the same rank x CHUNK block of B^T
  at::parallel_for(0, chunks * n, 1, [&](int64_t begin, int64_t end) {
    alignas(64) float acc[CHUNK];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = order[item % n], o0 = (item / n) * CHUNK, m = std::min(CHUNK, outs - o0);
      const float* ht = h.data() + t * rank;
      const T* cols = bp + (sp[t] - 1) * rank * outs + o0;
      for (int64_t o = 0; o < CHUNK; ++o) acc[o] = 0.0f;
      if (m == CHUNK) {
        for (int64_t j = 0; j < rank; ++j) {
          const float hj = ht[j];
          const T* col = cols + j * outs;
#pragma omp simd
          for (int64_t o = 0; o < CHUNK; ++o) acc[o] += hj * as_float(col[o]);
        }
      } else {
        for (int64_t j = 0; j < rank; ++j) {
          const float hj = ht[j];
          const T* col = cols + j * outs;
          for (int64_t o = 0; o < m; ++o) acc[o] += hj * as_float(col[o]);
        }
      }
      T* dst = op + t * out_stride + o0;
      if constexpr (std::is_same_v<T, float>) {
#pragma omp simd
        for (int64_t o = 0; o < m; ++o) dst[o] += acc[o];
      } else {  // bf16: add in float32, round to nearest even (finite values)
        uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
#pragma omp simd
        for (int64_t o = 0; o < m; ++o) {
          uint32_t u = uint32_t(d16[o]) << 16;
          float f;
          std::memcpy(&f, &u, 4);
          f += acc[o];
          std::memcpy(&u, &f, 4);
          u += 0x7FFFu + ((u >> 16) & 1u);
          d16[o] = static_cast<uint16_t>(u >> 16);
        }
      }
    }
  });
}

}  // namespace

// x [T, in]; a [N*r, in] every adapter's A stacked (block k for slot k+1); bt [N*r, out] every adapter's B
// transposed with its scaling folded in; slots [T] int64 (0: the base, no update); out [T, out] with a unit last
// stride, updated in place. One dtype (bf16 or float32) for x, a, bt and out.
void routed_lora_update(torch::Tensor x, torch::Tensor a, torch::Tensor bt, torch::Tensor slots, torch::Tensor out,
                        int64_t rank) {
  TORCH_CHECK(x.dim() == 2 && a.dim() == 2 && bt.dim() == 2 && out.dim() == 2 && slots.dim() == 1,
              "routed_lora_update: x, a, bt and out must be 2-D, slots 1-D");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == torch::kBFloat16 || dtype == torch::kFloat32, "routed_lora_update: bf16 or float32 only");
  for (const auto& t : {a, bt, out})
    TORCH_CHECK(t.scalar_type() == dtype && t.device().is_cpu(), "routed_lora_update: one dtype, CPU tensors");
  TORCH_CHECK(x.is_contiguous() && a.is_contiguous() && bt.is_contiguous() && out.stride(1) == 1,
              "routed_lora_update: x, a, bt contiguous and out with a unit last stride");
  TORCH_CHECK(slots.scalar_type() == torch::kInt64 && slots.is_contiguous() && slots.size(0) == x.size(0),
              "routed_lora_update: slots must be int64, one per token");
  TORCH_CHECK(rank > 0 && a.size(0) % rank == 0 && a.size(1) == x.size(1) && bt.size(0) == a.size(0) &&
                  out.size(0) == x.size(0) && bt.size(1) == out.size(1),
              "routed_lora_update: shapes of x, a, bt, out and rank do not agree");
  const int64_t adapters = a.size(0) / rank;
  const int64_t* sp = slots.data_ptr<int64_t>();
  for (int64_t t = 0; t < slots.size(0); ++t)  // a plain loop: a few tokens, no tensor ops per call
    TORCH_CHECK(sp[t] >= 0 && sp[t] <= adapters, "routed_lora_update: slot ", sp[t], " is past the ", adapters,
                " adapters");
  if (dtype == torch::kBFloat16)
    update<at::BFloat16>(x, a, bt, sp, adapters, out, rank);
  else
    update<float>(x, a, bt, sp, adapters, out, rank);
}
