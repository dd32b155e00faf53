// Row-wise float32 work in one call each (talon/models/row_ops.py, talon/models/row_top.py): a Llama
// layer's glue, with the bits of transformers' own forward (the RMS norm and the rotary embedding of the
// query and key heads), and the best entries of each row of scores (argmax and top-k), with the indices
// PyTorch's argmax gives.
//
// A plain decoding step of a small model on a slow CPU spends much of its time outside the products:
// PyTorch dispatches each of the norm's eight operations and the rotary embedding's dozen separately,
// a few microseconds each.  Each loop here performs the same IEEE operations in the same order, each
// rounded to float32 (built with -ffp-contract=off: no multiply-add is fused), so every element gets the
// bits the separate operations give.  The one reduction, the norm's sum of squares, is PyTorch's own
// (at::sum, as torch.mean sums before it divides).
//
// PyTorch's argmax and top-k walk a row of logits one element at a time with an index beside the value:
// on the 2-core AVX-512 Xeon about 2 ms for 32 rows of a 49,152-token vocabulary, 10 times its amax.  Here a
// block of a row is first compared as a whole with the best value so far (a loop the compiler
// vectorises), and only a block that holds a larger value (or a NaN) is walked element by element.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

// The element loops and the block comparison are built for AVX-512, AVX2 and the baseline, the loader
// picking the best this CPU runs (GCC's and Clang's function multiversioning, x86 only); elsewhere the
// baseline alone.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PICK_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PICK_CLONES
#endif

namespace {
// Rows a thread takes at a time in the norm and the rotary embedding: a step's few rows (a tree's 32) go
// on one thread, where waking the other cost more than it saved; a prompt's prefill is split.
constexpr int64_t kGlueRowsPerTask = 64;
// Elements of silu(gate) * up a thread takes at least (its exponentials cost more than the norm's work).
constexpr int64_t kSiluElementsPerTask = 16384;

// o[i] = x[i] * x[i] (torch.pow(x, 2) on float32).  The element loops here vectorise; every element is
// still one rounded IEEE operation after another, as in the scalar loop, so the bits do not change.
PICK_CLONES void squares(const float* __restrict x, float* __restrict o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] * x[i];
}

// o[i] = w[i] * (x[i] * inverse): the norm's scaling of one row.
PICK_CLONES void scale_row(const float* __restrict x, const float* __restrict w, float inverse, float* __restrict o,
                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = x[i] * inverse;
    o[i] = w[i] * scaled;
  }
}

// One head of d = 2 * half values: o = x * c + rotate_half(x) * s.
PICK_CLONES void rotate_head(const float* __restrict x, const float* __restrict c, const float* __restrict s,
                             float* __restrict o, int64_t half) {
  for (int64_t k = 0; k < half; ++k) {
    const float straight = x[k] * c[k];
    const float turned = (-x[k + half]) * s[k];
    o[k] = straight + turned;
  }
  for (int64_t k = half; k < 2 * half; ++k) {
    const float straight = x[k] * c[k];
    const float turned = x[k - half] * s[k];
    o[k] = straight + turned;
  }
}
}  // namespace

// x [..., h] float32, weight [h] float32 -> weight * (x * rsqrt(mean(x * x, -1) + eps)), x's shape:
// LlamaRMSNorm.forward on float32.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32, "float32 x and weight");
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "a weight of x's width");
  const auto xc = x.contiguous();
  const auto wc = weight.contiguous();
  const int64_t h = xc.size(-1), rows = h ? xc.numel() / h : 0;
  auto out = torch::empty_like(xc);
  if (rows == 0) return out;
  const float* xp = xc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  squares(xp, op, rows * h);  // pow(2): x * x
  const auto sums = at::sum(out.view({rows, h}), {1});
  const float* sp = sums.data_ptr<float>();
  // the scalars as PyTorch applies them to a float32 tensor: eps and the count cast to float32
  const float e = static_cast<float>(eps), count = static_cast<float>(h);
  at::parallel_for(0, rows, kGlueRowsPerTask, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float variance = sp[r] / count;
      const float inverse = 1.0f / std::sqrt(variance + e);  // rsqrt: a rounded root, then a rounded quotient
      scale_row(xp + r * h, wp, inverse, op + r * h, h);
    }
  });
  return out;
}

// x [B, R, H, D] float32 (each row's H x D values packed; any stride between rows), cos / sin [B or 1, R, D]
// -> x * cos + rotate_half(x) * sin, [B, R, H, D] contiguous (rotate_half: the halves of D swapped, the
// first negated).
torch::Tensor rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && cos.scalar_type() == torch::kFloat32 &&
                  sin.scalar_type() == torch::kFloat32,
              "float32 x, cos and sin");
  TORCH_CHECK(x.dim() == 4 && x.stride(3) == 1 && x.stride(2) == x.size(3) && x.size(3) % 2 == 0,
              "x [B, R, H, D] with each row's heads packed and D even");
  const int64_t b = x.size(0), rows = x.size(1), heads = x.size(2), d = x.size(3), half = d / 2;
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.dim() == 3 && (cos.size(0) == b || cos.size(0) == 1) &&
                  cos.size(1) == rows && cos.size(2) == d,
              "cos and sin [B or 1, R, D]");
  const auto c = cos.contiguous(), s = sin.contiguous();
  auto out = torch::empty({b, rows, heads, d}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* cp = c.data_ptr<float>();
  const float* sp = s.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t batch_stride = x.stride(0), row_stride = x.stride(1), angle_batch = c.size(0) == 1 ? 0 : rows * d;
  at::parallel_for(0, b * rows, kGlueRowsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t br = first; br < last; ++br) {
      const int64_t i = br / rows, r = br % rows;
      const float* cr = cp + i * angle_batch + r * d;
      const float* sr = sp + i * angle_batch + r * d;
      for (int64_t hd = 0; hd < heads; ++hd)
        rotate_head(xp + i * batch_stride + r * row_stride + hd * d, cr, sr, op + (br * heads + hd) * d, half);
    }
  });
  return out;
}

namespace {
constexpr int64_t kBlock = 64;            // elements compared with the best so far at a time
constexpr int64_t kRowsPerPickTask = 4;   // rows of scores a thread takes at a time

// Whether x[0 .. n) holds a value above `floor` or a NaN (x != x); no early exit, so it vectorises.
PICK_CLONES bool any_above_or_nan(const float* x, int64_t n, float floor) {
  int hit = 0;
  for (int64_t i = 0; i < n; ++i) hit |= (x[i] > floor) | (x[i] != x[i]);
  return hit != 0;
}

// The index of the first largest value of x[0 .. n) (n >= 1), NaN counting as the largest: torch.argmax's
// answer.
int64_t first_argmax(const float* x, int64_t n) {
  if (x[0] != x[0]) return 0;
  float best = x[0];
  int64_t at = 0;
  for (int64_t start = 1; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    if (!any_above_or_nan(x + start, end - start, best)) continue;
    for (int64_t i = start; i < end; ++i) {
      if (x[i] != x[i]) return i;
      if (x[i] > best) best = x[i], at = i;
    }
  }
  return at;
}

// The k largest values of x[0 .. n) (k <= n), best first, equal values in index order, into values /
// ids; false (nothing promised) where the row holds a NaN.
bool row_top(const float* x, int64_t n, int64_t k, float* values, int64_t* ids) {
  int64_t held = 0;
  auto insert = [&](float v, int64_t i) {
    int64_t pos = std::min(held, k - 1);
    while (pos > 0 && values[pos - 1] < v) {
      values[pos] = values[pos - 1], ids[pos] = ids[pos - 1];
      --pos;
    }
    values[pos] = v, ids[pos] = i;
    held = std::min(held + 1, k);
  };
  for (int64_t i = 0; i < k; ++i) {
    if (x[i] != x[i]) return false;
    insert(x[i], i);
  }
  for (int64_t start = k; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    if (!any_above_or_nan(x + start, end - start, values[k - 1])) continue;
    for (int64_t i = start; i < end; ++i) {
      if (x[i] != x[i]) return false;
      if (x[i] > values[k - 1]) insert(x[i], i);
    }
  }
  return true;
}

// bfloat16 bits -> float32, exactly (the bits move to the upper half).
PICK_CLONES void widen(const uint16_t* __restrict h, float* __restrict f, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(h[i]) << 16;
    std::memcpy(f + i, &bits, 4);
  }
}

// The rows of a float32 or bfloat16 matrix [R, V] (each row contiguous) as float32: a float32 row where it
// lies, a bfloat16 row widened into this thread's scratch slot ``slot`` (exact, so every answer is the one the
// matrix widened as a whole gives).  The screened LM head's scores stay bfloat16: widening a tree's 20-32
// rows of 49,152 into a new float32 matrix took about 0.25 ms of a verification (a 4-MB write, from outputs
// that oneDNN's two threads had just left in their own caches), where a row's scratch stays in L2.
class FloatRows {
 public:
  FloatRows(const torch::Tensor& x, int slot) : slot_(slot), width_(x.size(1)), stride_(x.stride(0)) {
    TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1 &&
                    (x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16),
                "float32 or bfloat16 [R, V], rows contiguous");
    if (x.scalar_type() == torch::kFloat32)
      floats_ = x.data_ptr<float>();
    else
      halves_ = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  }
  const float* row(int64_t r) const {
    if (floats_) return floats_ + r * stride_;
    thread_local std::vector<float> scratch[2];
    auto& into = scratch[slot_];
    if (static_cast<int64_t>(into.size()) < width_) into.resize(width_);
    widen(halves_ + r * stride_, into.data(), width_);
    return into.data();
  }

 private:
  const float* floats_ = nullptr;
  const uint16_t* halves_ = nullptr;
  int slot_;
  int64_t width_, stride_;
};
}  // namespace

// x [R, V] float32, V >= 1 -> int64 [R]: torch.argmax(x, dim=1) (the first largest; a NaN, the first NaN).
torch::Tensor row_argmax(const torch::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.dim() == 2 && x.size(1) >= 1, "float32 x [R, V], V >= 1");
  const auto xc = x.contiguous();
  const int64_t rows = xc.size(0), n = xc.size(1);
  auto out = torch::empty({rows}, xc.options().dtype(torch::kInt64));
  const float* xp = xc.data_ptr<float>();
  int64_t* op = out.data_ptr<int64_t>();
  at::parallel_for(0, rows, kRowsPerPickTask, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) op[r] = first_argmax(xp + r * n, n);
  });
  return out;
}

// x [R, V] float32 or bfloat16, 1 <= k <= V -> (values float32 [R, k], ids int64 [R, k]): each row's k largest,
// best first, equal values in index order; torch.topk's values, its ids wherever the row has no ties among
// them.  A row with a NaN gets torch.topk's answer.
std::tuple<torch::Tensor, torch::Tensor> row_topk(const torch::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 2 && k >= 1 && k <= x.size(1), "x [R, V] and 1 <= k <= V");
  const auto xc = x.contiguous();
  const FloatRows xr(xc, 0);
  const int64_t rows = xc.size(0), n = xc.size(1);
  auto values = torch::empty({rows, k}, xc.options().dtype(torch::kFloat32));
  auto ids = torch::empty({rows, k}, xc.options().dtype(torch::kInt64));
  float* vp = values.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<char> with_nan(rows, 0);
  at::parallel_for(0, rows, kRowsPerPickTask, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) with_nan[r] = !row_top(xr.row(r), n, k, vp + r * k, ip + r * k);
  });
  for (int64_t r = 0; r < rows; ++r) {
    if (!with_nan[r]) continue;
    auto top = xc[r].topk(k);
    values[r].copy_(std::get<0>(top));
    ids[r].copy_(std::get<1>(top));
  }
  return {values, ids};
}

// ---- Grouped attention of a few float32 query rows --------------------------------------------------
// A tree's verification and a plain step attend from 1 to about 129 query rows over the cached keys.
// PyTorch's SDPA gives each query head its own task and its products their own calls; here the query
// heads that share a key/value head are stacked, 16 rows to a task (one vector lane a row), and the task
// computes its scores, softmax and weighted values in registers.  Every row follows the same operations
// in the same order whatever its lane and whatever other rows share the call (scores: a multiply-add
// chain over the head dimension; softmax and weighted values: one pass over the keys in order), so a row
// gets the same bits alone as in a tree (tests/test_few_rows_attention.py).  Multiply-adds are fused here
// (unlike the glue above, which keeps PyTorch's roundings); the exponential is Cephes' single-precision
// polynomial.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
namespace {
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
#define ATT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define LOADV(p) ({ v16 _v; std::memcpy(&_v, (p), 64); _v; })
#define STOREV(p, v) do { v16 _v = (v); std::memcpy((p), &_v, 64); } while (0)
#define SPLAT(x) ((v16){} + (x))
constexpr int64_t kLanes = 16;      // floats a vector = stacked query rows a task
constexpr int64_t kHeadDim = 64;    // the head dimension this kernel takes
constexpr int64_t kScoreKeys = 8;   // keys a scores tile (8 vector accumulators)
constexpr int64_t kValueRows = 6;   // rows a weighted-values tile (6 x 4 vector accumulators)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kDotsPerTask = 64;  // (row, token) pairs a thread takes at least in row_dots

// e^x lane by lane (Cephes' expf: x = n ln2 + r, a degree-6 polynomial in r, times 2^n), exactly 0 where x
// is -inf (a hidden key).
#define VEXP(x_in, out) do { \
  v16 _x = (x_in); \
  vi16 _live = _x > kNegInf; \
  v16 _c = _x < -87.33654f ? SPLAT(-87.33654f) : _x; \
  _c = _c > 88.3762626647949f ? SPLAT(88.3762626647949f) : _c; \
  v16 _n = (_c * 1.44269504088896341f + 12582912.f) - 12582912.f; \
  v16 _r = _c - _n * 0.693359375f; \
  _r = _r - _n * -2.12194440e-4f; \
  v16 _y = SPLAT(1.9875691500E-4f); \
  _y = _y * _r + 1.3981999507E-3f; \
  _y = _y * _r + 8.3334519073E-3f; \
  _y = _y * _r + 4.1665795894E-2f; \
  _y = _y * _r + 1.6666665459E-1f; \
  _y = _y * _r + 5.0000001201E-1f; \
  _y = _y * (_r * _r) + _r + 1.f; \
  vi16 _e = (__builtin_convertvector(_n, vi16) + 127) << 23; \
  v16 _p; std::memcpy(&_p, &_e, 64); \
  v16 _res = _y * _p; \
  vi16 _bits; std::memcpy(&_bits, &_res, 64); _bits &= _live; \
  std::memcpy(&(out), &_bits, 64); \
} while (0)

// A task's scores: up to kLanes stacked query rows, already scaled, as qt [kHeadDim][kLanes], against n keys
// of one key/value head (k: rows of kHeadDim floats, key_stride apart), into st [n][kLanes]: for each lane and
// key one chain of multiply-adds over the head dimension in order.
ATT_CLONES void task_scores(const float* qt, const float* k, int64_t key_stride, int64_t n, float* st) {
  int64_t key = 0;
  for (; key + kScoreKeys <= n; key += kScoreKeys) {
    v16 acc[kScoreKeys] = {};
    for (int64_t d = 0; d < kHeadDim; ++d) {
      v16 q = LOADV(qt + d * kLanes);
#pragma GCC unroll 8
      for (int64_t j = 0; j < kScoreKeys; ++j) acc[j] += k[(key + j) * key_stride + d] * q;
    }
#pragma GCC unroll 8
    for (int64_t j = 0; j < kScoreKeys; ++j) STOREV(st + (key + j) * kLanes, acc[j]);
  }
  for (; key < n; ++key) {  // the same chain, one key at a time
    v16 acc = {};
    for (int64_t d = 0; d < kHeadDim; ++d) acc += k[key * key_stride + d] * LOADV(qt + d * kLanes);
    STOREV(st + key * kLanes, acc);
  }
}

// Two tasks' scores against the same keys at once (qt0 / qt1 into st0 / st1): each key value read once for
// both, so a step reads 8 keys' values and 2 query vectors for 16 multiply-adds where one task read 8 and 1
// for 8.  Every lane's chains are task_scores' own, so the same bits.
ATT_CLONES void pair_scores(const float* qt0, const float* qt1, const float* k, int64_t key_stride, int64_t n,
                            float* st0, float* st1) {
  int64_t key = 0;
  for (; key + kScoreKeys <= n; key += kScoreKeys) {
    v16 acc0[kScoreKeys] = {}, acc1[kScoreKeys] = {};
    for (int64_t d = 0; d < kHeadDim; ++d) {
      v16 q0 = LOADV(qt0 + d * kLanes), q1 = LOADV(qt1 + d * kLanes);
#pragma GCC unroll 8
      for (int64_t j = 0; j < kScoreKeys; ++j) {
        const float kv = k[(key + j) * key_stride + d];
        acc0[j] += kv * q0;
        acc1[j] += kv * q1;
      }
    }
#pragma GCC unroll 8
    for (int64_t j = 0; j < kScoreKeys; ++j) {
      STOREV(st0 + (key + j) * kLanes, acc0[j]);
      STOREV(st1 + (key + j) * kLanes, acc1[j]);
    }
  }
  if (key < n) {
    task_scores(qt0, k + key * key_stride, key_stride, n - key, st0 + key * kLanes);
    task_scores(qt1, k + key * key_stride, key_stride, n - key, st1 + key * kLanes);
  }
}

// One task after its scores (task_scores): ``rows`` stacked query rows (the other lanes are padding) over n
// keys of one key/value head (v: rows of kHeadDim floats, value_stride apart).  mask_t [n - prefix][kLanes]:
// the additive mask of the keys past the prefix every row sees.  st: the scores [n][kLanes], then scratch.
// out_rows [rows][kHeadDim].
ATT_CLONES void attend_task(int64_t rows, const float* v, int64_t value_stride, int64_t n, int64_t prefix,
                            const float* mask_t, float* st, float* out_rows) {
  for (int64_t j = prefix; j < n; ++j)
    STOREV(st + j * kLanes, LOADV(st + j * kLanes) + LOADV(mask_t + (j - prefix) * kLanes));
  v16 top = SPLAT(kNegInf);
  for (int64_t j = 0; j < n; ++j) {
    v16 s = LOADV(st + j * kLanes);
    top = s > top ? s : top;
  }
  vi16 dead = top == kNegInf;  // a row that sees no key gets zeros
  top = dead ? SPLAT(0.f) : top;
  v16 sum = {};
  for (int64_t j = 0; j < n; ++j) {
    v16 e;
    VEXP(LOADV(st + j * kLanes) - top, e);
    STOREV(st + j * kLanes, e);
    sum += e;
  }
  v16 inv = 1.f / sum;
  inv = dead ? SPLAT(0.f) : inv;
  float inv_rows[kLanes];
  std::memcpy(inv_rows, &inv, 64);
  for (int64_t r0 = 0; r0 < rows; r0 += kValueRows) {  // the real rows only
    const int64_t tile = std::min(kValueRows, rows - r0);
    v16 acc[kValueRows][kHeadDim / kLanes] = {};
    for (int64_t j = 0; j < n; ++j) {
      const float* vr = v + j * value_stride;
      v16 v0 = LOADV(vr), v1 = LOADV(vr + 16), v2 = LOADV(vr + 32), v3 = LOADV(vr + 48);
      const float* w = st + j * kLanes + r0;
#pragma GCC unroll 6
      for (int64_t r = 0; r < kValueRows; ++r) {
        float wr = r < tile ? w[r] : 0.f;
        acc[r][0] += wr * v0;
        acc[r][1] += wr * v1;
        acc[r][2] += wr * v2;
        acc[r][3] += wr * v3;
      }
    }
    for (int64_t r = 0; r < tile; ++r)
      for (int64_t c = 0; c < kHeadDim / kLanes; ++c)
        STOREV(out_rows + (r0 + r) * kHeadDim + c * kLanes, acc[r][c] * inv_rows[r0 + r]);
  }
}
}  // namespace
#pragma GCC pop_options

// query [B, H, q, 64] (each head's rows of 64 contiguous), key / value [B, KVH, n, 64] (the same), H a
// multiple of KVH (query head h reads key/value head h / (H / KVH)), mask additive float32 [B, 1, q, >= n]
// or [1, 1, q, >= n] for every batch (its first n keys; 0 visible, -inf hidden) -> [B, q, H, 64].
torch::Tensor grouped_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                const torch::Tensor& mask, double scale) {
  TORCH_CHECK(query.scalar_type() == torch::kFloat32 && key.scalar_type() == torch::kFloat32 &&
                  value.scalar_type() == torch::kFloat32 && mask.scalar_type() == torch::kFloat32,
              "float32 query, key, value and mask");
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4 && mask.dim() == 4, "4-d tensors");
  const int64_t B = query.size(0), H = query.size(1), q = query.size(2);
  const int64_t KVH = key.size(1), n = key.size(2);
  TORCH_CHECK(query.size(3) == kHeadDim && key.size(3) == kHeadDim && value.size(3) == kHeadDim &&
                  query.stride(3) == 1 && key.stride(3) == 1 && value.stride(3) == 1,
              "head dimension 64, contiguous");
  TORCH_CHECK(key.size(0) == B && value.sizes() == key.sizes() && KVH > 0 && H % KVH == 0, "grouped heads");
  TORCH_CHECK((mask.size(0) == B || mask.size(0) == 1) && mask.size(1) == 1 && mask.size(2) == q &&
                  mask.size(3) >= n && mask.stride(3) == 1,
              "mask [B or 1, 1, q, >= n]");
  const int64_t mask_batch_stride = mask.size(0) == 1 ? 0 : mask.stride(0);
  const int64_t groups = H / KVH;
  const float* mp = mask.data_ptr<float>();
  int64_t prefix = n;  // keys every row of every batch sees
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < q; ++i) {
      const float* m = mp + b * mask_batch_stride + i * mask.stride(2);
      int64_t j = 0;
      while (j < prefix && m[j] == 0.f) ++j;
      prefix = j;
    }
  auto out = torch::empty({B, q, H, kHeadDim}, query.options());
  const int64_t stacked = groups * q;
  const int64_t tasks_per_head = (stacked + kLanes - 1) / kLanes;
  const float* qp = query.data_ptr<float>();
  const float* kp = key.data_ptr<float>();
  const float* vp = value.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float fscale = static_cast<float>(scale);
  at::parallel_for(0, B * KVH * tasks_per_head, 1, [&](int64_t first, int64_t last) {
    // two tasks' scratch: consecutive tasks of one key/value head take their scores together (pair_scores)
    std::vector<float> qt(2 * kHeadDim * kLanes), mask_t(2 * (n - prefix) * kLanes), st(2 * n * kLanes);
    std::vector<float> rows_out(kLanes * kHeadDim);
    struct Task {
      int64_t b, g, r0, rows;  // batch, key/value head, first stacked row, real rows
    };
    auto locate = [&](int64_t t) {
      const int64_t bh = t / tasks_per_head, r0 = (t % tasks_per_head) * kLanes;
      return Task{bh / KVH, bh % KVH, r0, std::min(kLanes, stacked - r0)};
    };
    auto gather = [&](int64_t t, float* tq, float* tm) {  // task t's scaled query rows and mask, transposed
      const auto [b, g, r0, rows] = locate(t);
      for (int64_t r = 0; r < kLanes; ++r) {
        if (r < rows) {
          const int64_t h = g * groups + (r0 + r) / q, i = (r0 + r) % q;
          const float* src = qp + b * query.stride(0) + h * query.stride(1) + i * query.stride(2);
          for (int64_t d = 0; d < kHeadDim; ++d) tq[d * kLanes + r] = src[d] * fscale;
          const float* m = mp + b * mask_batch_stride + i * mask.stride(2);
          for (int64_t j = prefix; j < n; ++j) tm[(j - prefix) * kLanes + r] = m[j];
        } else {  // a padding lane (its output is dropped)
          for (int64_t d = 0; d < kHeadDim; ++d) tq[d * kLanes + r] = 0.f;
          for (int64_t j = prefix; j < n; ++j) tm[(j - prefix) * kLanes + r] = 0.f;
        }
      }
    };
    auto finish = [&](int64_t t, float* tm, float* ts) {  // task t's softmax and weighted values into out
      const auto [b, g, r0, rows] = locate(t);
      attend_task(rows, vp + b * value.stride(0) + g * value.stride(1), value.stride(2), n, prefix, tm, ts,
                  rows_out.data());
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t h = g * groups + (r0 + r) / q, i = (r0 + r) % q;
        std::memcpy(op + ((b * q + i) * H + h) * kHeadDim, rows_out.data() + r * kHeadDim, kHeadDim * sizeof(float));
      }
    };
    float *q0 = qt.data(), *q1 = q0 + kHeadDim * kLanes, *m0 = mask_t.data(), *m1 = m0 + (n - prefix) * kLanes;
    float *s0 = st.data(), *s1 = s0 + n * kLanes;
    for (int64_t t = first; t < last;) {
      const Task task = locate(t);
      const float* keys = kp + task.b * key.stride(0) + task.g * key.stride(1);
      const bool pair = t + 1 < last && (t + 1) / tasks_per_head == t / tasks_per_head;
      gather(t, q0, m0);
      if (pair) {
        gather(t + 1, q1, m1);
        pair_scores(q0, q1, keys, key.stride(2), n, s0, s1);
      } else {
        task_scores(q0, keys, key.stride(2), n, s0);
      }
      finish(t, m0, s0);
      if (pair) finish(t + 1, m1, s1);
      t += pair ? 2 : 1;
    }
  });
  return out;
}

// ---- The tokens of a flat row that may still be the screened LM head's pick --------------------------------
// A bfloat16-screened LM head (talon/models/lm_head.py) looks for a flat row's candidates over the whole
// vocabulary: every token whose score reaches the row's cut, and of those each whose score plus its own error
// bound reaches the row's floor.  PyTorch does it in several passes over a gathered copy of the rows; here each
// row is read once where it lies (a block of 64 compared with the cut as a whole first) and the error of a
// token past the cut is computed with the same float32 operations in the same order as the Python's, so the
// same tokens come out, in the same order (row by row, token by token).
namespace {
PICK_CLONES bool any_at_or_above(const float* __restrict x, int64_t n, float cut) {
  bool any = false;
  for (int64_t i = 0; i < n; ++i) any |= x[i] >= cut;
  return any;
}
}  // namespace

// scores, approx [R, V] float32 or bfloat16 (rows contiguous; approx may be scores), rows int64 [n], cut,
// floor float32 [n], radius float32 [R], norms float32 [V], unit, scale -> (rows int64 [c], tokens int64
// [c]): for each i, every token j with scores[rows[i], j] >= cut[i] and scores[rows[i], j] + scale *
// (radius[rows[i]] * norms[j] + unit * |approx[rows[i], j]|) >= floor[i], in the order of i, then j (a
// bfloat16 row widened to float32 as it is read).
std::tuple<torch::Tensor, torch::Tensor> row_reaching(const torch::Tensor& scores, const torch::Tensor& approx,
                                                      const torch::Tensor& rows, const torch::Tensor& cut,
                                                      const torch::Tensor& floor, const torch::Tensor& radius,
                                                      const torch::Tensor& norms, double unit, double scale) {
  TORCH_CHECK(scores.dim() == 2 && approx.sizes() == scores.sizes(), "scores and approx [R, V]");
  const FloatRows score_rows(scores, 0), approx_rows(approx, 1);
  const bool same = scores.data_ptr() == approx.data_ptr() && scores.strides() == approx.strides() &&
                    scores.scalar_type() == approx.scalar_type();
  const int64_t n = rows.size(0), R = scores.size(0), V = scores.size(1);
  TORCH_CHECK(rows.scalar_type() == torch::kInt64 && rows.dim() == 1, "int64 rows [n]");
  TORCH_CHECK(cut.scalar_type() == torch::kFloat32 && floor.scalar_type() == torch::kFloat32 && cut.numel() == n &&
                  floor.numel() == n,
              "float32 cut and floor [n]");
  TORCH_CHECK(radius.scalar_type() == torch::kFloat32 && radius.numel() == R && norms.scalar_type() == torch::kFloat32 &&
                  norms.numel() == V,
              "float32 radius [R] and norms [V]");
  const auto rc = rows.contiguous(), cc = cut.contiguous(), fc = floor.contiguous(), radc = radius.contiguous(),
             nc = norms.contiguous();
  const int64_t* rp = rc.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) TORCH_CHECK(rp[i] >= 0 && rp[i] < R, "a row outside scores");
  const float *cp = cc.data_ptr<float>(), *fp = fc.data_ptr<float>(), *radp = radc.data_ptr<float>(),
              *np = nc.data_ptr<float>();
  const float funit = static_cast<float>(unit), fscale = static_cast<float>(scale);
  std::vector<std::vector<int64_t>> found(n);
  at::parallel_for(0, n, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = rp[i];
      const float* s = score_rows.row(r);
      const float* a = same ? s : approx_rows.row(r);
      for (int64_t start = 0; start < V; start += kBlock) {
        const int64_t end = std::min(V, start + kBlock);
        if (!any_at_or_above(s + start, end - start, cp[i])) continue;
        for (int64_t j = start; j < end; ++j) {
          if (!(s[j] >= cp[i])) continue;
          const float spread = radp[r] * np[j];
          const float rounding = funit * std::fabs(a[j]);
          const float error = fscale * (spread + rounding);
          if (s[j] + error >= fp[i]) found[i].push_back(j);
        }
      }
    }
  });
  int64_t total = 0;
  for (const auto& f : found) total += static_cast<int64_t>(f.size());
  auto out_rows = torch::empty({total}, rc.options());
  auto out_tokens = torch::empty({total}, rc.options());
  int64_t* orp = out_rows.data_ptr<int64_t>();
  int64_t* otp = out_tokens.data_ptr<int64_t>();
  for (int64_t i = 0, at = 0; i < n; ++i)
    for (const int64_t j : found[i]) orp[at] = rp[i], otp[at] = j, ++at;
  return {out_rows, out_tokens};
}

// ---- Dot products of a few (row, token) pairs ---------------------------------------------------------
// The screened LM head's exact logits: hidden row rows[i] times weight row tokens[i], for a few hundred
// pairs.  PyTorch's (hidden[rows] * weight[tokens]).sum(-1) copies both gathers and the products into new
// tensors first (at 32 rows about 0.4 ms of a verification); here each pair reads its two rows where they
// lie.  One pair's sum: 16 lanes, lane l the multiply-add chain over k = l, l + 16, ... in order, then the
// lanes added pairwise (8 + 8, 4 + 4, 2 + 2, 1 + 1): a pair gets the same bits whatever the other pairs
// (the compiler keeps the source's order without -ffast-math).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
namespace {
ATT_CLONES float row_dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  v16 acc = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) acc += LOADV(a + k) * LOADV(b + k);
  float lanes[kLanes];
  std::memcpy(lanes, &acc, 64);
  for (int64_t l = 0; k < n; ++k, ++l) lanes[l] += a[k] * b[k];
  for (int64_t width = kLanes / 2; width >= 1; width /= 2)
    for (int64_t l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
}
}  // namespace
#pragma GCC pop_options

// hidden [R, H], weight [V, H] float32 (each row contiguous), rows, tokens int64 [n] -> float32 [n]: the dot
// product of hidden row rows[i] and weight row tokens[i] (row_dot's order; within float32's bound for a sum
// of H products of PyTorch's).
torch::Tensor row_dots(const torch::Tensor& hidden, const torch::Tensor& rows, const torch::Tensor& weight,
                       const torch::Tensor& tokens) {
  TORCH_CHECK(hidden.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                  hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "float32 hidden [R, H] and weight [V, H]");
  TORCH_CHECK(rows.scalar_type() == torch::kInt64 && tokens.scalar_type() == torch::kInt64 && rows.dim() == 1 &&
                  tokens.sizes() == rows.sizes(),
              "int64 rows and tokens [n]");
  const auto hc = hidden.stride(1) == 1 ? hidden : hidden.contiguous();
  const auto wc = weight.stride(1) == 1 ? weight : weight.contiguous();
  const auto rc = rows.contiguous(), tc = tokens.contiguous();
  const int64_t n = rc.size(0), width = hc.size(1), R = hc.size(0), V = wc.size(0);
  const int64_t *rp = rc.data_ptr<int64_t>(), *tp = tc.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(rp[i] >= 0 && rp[i] < R && tp[i] >= 0 && tp[i] < V, "a row or token outside hidden or weight");
  auto out = torch::empty({n}, hc.options());
  float* op = out.data_ptr<float>();
  const float *hp = hc.data_ptr<float>(), *wp = wc.data_ptr<float>();
  const int64_t hs = hc.stride(0), ws = wc.stride(0);
  at::parallel_for(0, n, kDotsPerTask, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) op[i] = row_dot(hp + rp[i] * hs, wp + tp[i] * ws, width);
  });
  return out;
}

// ---- Each asked row's log-sum-exp of float32 scores ------------------------------------------------------
// A verification's node probabilities need each parent row's normaliser over the whole vocabulary.  PyTorch's
// logsumexp of the asked rows gathers them into a copy and then walks them four times (max, subtract,
// exponential, sum); here each asked row is read where it lies, once for its maximum and once for the sum of
// exponentials (Cephes' expf above, its multiply-adds fused), summed in float32 a block of 256 at a time and
// the blocks in double.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
namespace {
constexpr int64_t kSumBlock = 256;

// log(sum_j exp(scale * x[j])) of one row; false where the row's largest scaled value is not finite or the
// row holds a NaN (the caller asks PyTorch).
ATT_CLONES bool row_lse(const float* __restrict x, int64_t n, float scale, float* out) {
  v16 top = SPLAT(kNegInf);
  vi16 nan = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const v16 s = LOADV(x + j) * scale;
    nan |= s != s;
    top = s > top ? s : top;
  }
  float m = kNegInf;
  bool odd = false;
  for (int64_t l = 0; l < kLanes; ++l) m = std::max(m, top[l]), odd |= nan[l] != 0;
  for (; j < n; ++j) {
    const float s = x[j] * scale;
    odd |= s != s;
    m = std::max(m, s);
  }
  if (odd || !std::isfinite(m)) return false;
  double total = 0.0;
  j = 0;
  while (j + kLanes <= n) {
    v16 acc = {};
    const int64_t end = std::min(n - n % kLanes, j + kSumBlock);
    for (; j < end; j += kLanes) {
      v16 e;
      VEXP(LOADV(x + j) * scale - m, e);
      acc += e;
    }
    float block = 0.f;
    for (int64_t l = 0; l < kLanes; ++l) block += acc[l];
    total += block;
  }
  for (; j < n; ++j) total += std::exp(static_cast<double>(x[j] * scale - m));
  *out = static_cast<float>(m + std::log(total));
  return true;
}
}  // namespace
#pragma GCC pop_options

// x [R, V] float32 or bfloat16 (rows contiguous), rows int64 [n] (each in [0, R)), scale -> float32 [n]: the
// log-sum-exp of row rows[i] of x * scale (x widened to float32), as torch.logsumexp(x[rows].float() * scale,
// dim=1) within float32 rounding (a row that holds a NaN, or whose largest scaled value is infinite, gets
// PyTorch's answer).
torch::Tensor row_logsumexp(const torch::Tensor& x, const torch::Tensor& rows, double scale) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) >= 1, "x [R, V], V >= 1");
  TORCH_CHECK(rows.scalar_type() == torch::kInt64 && rows.dim() == 1, "int64 rows [n]");
  const auto xc = x.stride(1) == 1 ? x : x.contiguous();
  const auto rc = rows.contiguous();
  const FloatRows xr(xc, 0);
  const int64_t n = rc.size(0), width = xc.size(1);
  const int64_t* rp = rc.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) TORCH_CHECK(rp[i] >= 0 && rp[i] < xc.size(0), "a row outside x");
  auto out = torch::empty({n}, xc.options().dtype(torch::kFloat32));
  float* op = out.data_ptr<float>();
  const float fscale = static_cast<float>(scale);
  std::vector<char> odd(n, 0);
  at::parallel_for(0, n, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) odd[i] = !row_lse(xr.row(rp[i]), width, fscale, op + i);
  });
  for (int64_t i = 0; i < n; ++i)
    if (odd[i]) op[i] = torch::logsumexp(xc[rp[i]].to(torch::kFloat32) * fscale, 0).item<float>();
  return out;
}

// The MLP's silu(gate) * up in one pass, with the bits of PyTorch's AVX-512 kernels: its silu is
// x / (1 + exp(-x)) with SLEEF's expf16_u10 over pairs of 16-float vectors, the scalar expf for a row's
// last (n mod 32) elements, and the product a separate rounded multiply.  The SLEEF function is the one
// libtorch_cpu exports, looked up when first needed (none: silu_mul_available() is false and the forward
// keeps PyTorch's two operations); the Python side also compares the bits with PyTorch's at load.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <dlfcn.h>
#include <immintrin.h>

namespace {
void* sleef_expf16() {
  static void* const fn = dlsym(RTLD_DEFAULT, "Sleef_expf16_u10");
  return fn;
}

__attribute__((target("avx512f"))) void silu_mul_row(const float* __restrict g, const float* __restrict u,
                                                     float* __restrict o, int64_t n) {
  const auto expf16 = reinterpret_cast<__m512 (*)(__m512)>(sleef_expf16());
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const int64_t vectors_end = n - n % 32;  // PyTorch takes two vectors a turn, then (n mod 32) floats one by one
  int64_t i = 0;
  for (; i < vectors_end; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    const __m512 minus = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign));
    const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, expf16(minus)));
    _mm512_storeu_ps(o + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
  }
  for (; i < n; ++i) {
    const float silu = g[i] / (1.0f + std::exp(-g[i]));
    o[i] = silu * u[i];
  }
}
}  // namespace

bool silu_mul_available() { return __builtin_cpu_supports("avx512f") && sleef_expf16() != nullptr; }

// gate, up [..., n] float32 of one shape (rows at any stride) -> silu(gate) * up [..., n], contiguous.
torch::Tensor silu_mul(const torch::Tensor& gate, const torch::Tensor& up) {
  TORCH_CHECK(silu_mul_available(), "silu_mul needs AVX-512 and libtorch_cpu's SLEEF");
  TORCH_CHECK(gate.scalar_type() == torch::kFloat32 && up.scalar_type() == torch::kFloat32 && gate.dim() >= 1 &&
                  gate.sizes() == up.sizes(),
              "float32 gate and up of one shape");
  const int64_t n = gate.size(-1);
  auto out = torch::empty(gate.sizes(), gate.options());
  if (out.numel() == 0) return out;
  auto g = gate.reshape({-1, n}), u = up.reshape({-1, n});
  if (g.stride(1) != 1) g = g.contiguous();
  if (u.stride(1) != 1) u = u.contiguous();
  const int64_t rows = g.size(0), gs = g.stride(0), us = u.stride(0);
  const float* gp = g.data_ptr<float>();
  const float* up_ = u.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, kSiluElementsPerTask / n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) silu_mul_row(gp + r * gs, up_ + r * us, op + r * n, n);
  });
  return out;
}
#else
bool silu_mul_available() { return false; }
torch::Tensor silu_mul(const torch::Tensor& gate, const torch::Tensor&) {
  TORCH_CHECK(false, "silu_mul is built for x86-64 only");
  return gate;
}
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "LlamaRMSNorm's float32 forward in one call", py::call_guard<py::gil_scoped_release>());
  m.def("rotary", &rotary, "x * cos + rotate_half(x) * sin in one call", py::call_guard<py::gil_scoped_release>());
  m.def("row_argmax", &row_argmax, "torch.argmax(x, dim=1) of float32 rows", py::call_guard<py::gil_scoped_release>());
  m.def("row_topk", &row_topk, "each float32 row's k largest, best first", py::call_guard<py::gil_scoped_release>());
  m.def("grouped_attention", &grouped_attention, "grouped-query attention of a few float32 query rows",
        py::call_guard<py::gil_scoped_release>());
  m.def("row_reaching", &row_reaching, "a flat row's tokens that may reach its floor", py::call_guard<py::gil_scoped_release>());
  m.def("row_dots", &row_dots, "dot products of (hidden row, weight row) pairs", py::call_guard<py::gil_scoped_release>());
  m.def("row_logsumexp", &row_logsumexp, "each asked float32 row's log-sum-exp", py::call_guard<py::gil_scoped_release>());
  m.def("silu_mul_available", &silu_mul_available, "whether silu_mul runs here (AVX-512, SLEEF found)");
  m.def("silu_mul", &silu_mul, "silu(gate) * up with PyTorch's float32 bits", py::call_guard<py::gil_scoped_release>());
}
