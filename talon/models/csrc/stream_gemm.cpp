// A float32 product y = x @ W.T (+ bias) for the few rows of plain decoding and tree verification on
// AVX-512 or AVX2 CPUs (talon/models/stream_gemm.py builds this file once for each, with -mavx512f or
// -mavx2).  W is laid out once as column blocks of 16 outputs, each [in_features][16] contiguous, so a
// block is one sequential stream and a k-step of a block one 64-byte cache line.  Each thread walks a
// contiguous range of groups of blocks; a pass multiplies a few rows by a group as its weights go by.
// Memory and arithmetic overlap through prefetching: a one-pass product prefetches its own stream 64
// steps ahead; with several passes every pass also prefetches a share of the next group's stream, so
// memory stays busy while the later passes run from cache.  With two to four passes (AVX-512: 9 to 32
// rows) a group goes by in chunks of kChunk k-steps, every pass over a chunk before the next, so the
// passes after the first read the chunk from L1 rather than the whole group from L2 (a pass's partial
// sums wait between chunks in a small buffer of the thread's, which stays in L1: stored as float32 and read
// back, exactly; in y, whose rows lie a row of outputs apart, verify(32) took about 2 % longer).
//
// Every output element is one chain of fused multiply-adds over k = 0 .. in_features - 1 in order,
// whatever the number of rows, the row's place among them, the blocking, the thread split or the
// vector width: a row's result has the same bits in a product of 1 row or of 64, on either build.  A
// residual to add (a decoder layer's) is added as the outputs are stored, while they are still in
// registers, instead of by a separate pass over outputs that may by then lie in the other core's cache.
//
// A weight may also be packed as bfloat16 (half the bytes to stream; a drafter's few-row calls on a CPU
// without bfloat16 arithmetic): each weight is widened to float32 as it is loaded (exact), so the product
// has the bits of the float32 kernel on the bfloat16-rounded weight.
//
// A float32 weight dequantized from 4- or 8-bit blocks (GGUF's Q4_1, as the embedded model's decoder layers are:
// every run of 32 inputs of an output is fl(fl(d * q) + m), codes q in 0..15, one scale d and offset m; or
// Q8_0, as its tied embedding is: fl(d * q), q in -128..127) may be packed as those codes instead
// (``pack_codes``: derived from the float32 values and kept only where every weight comes back with its
// bits): 0.75 or 1.125 bytes a weight in place of 4.  Each chunk of a group is decoded into a thread's
// float32 scratch in L1 (the file's dequantization, each operation rounded) and the float32 passes run over
// it, so the product has the float32 kernel's bits.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kLanes = 16;  // outputs in a column block
constexpr int64_t kAhead = 64;  // how many k-steps ahead a pass prefetches its own stream
// Products of more rows than the largest tree verified (a prompt's prefill) go a tile of rows at a time,
// a tile's rows of x at most kTileBytes (the same bits: a row's chains do not depend on its tile).
constexpr int64_t kTileAbove = 128;
constexpr int64_t kTileBytes = 128 * 1024;
// k-steps of a chunk: a group's chunk (3 blocks, 12 KB) and a pass's rows of x stay in L1.  On the 2-core
// Xeon with two AVX-512 multiply-add units a core, the model's products at 9 to 16 rows took 9-15 % less
// time in chunks of 64 than a group whole, at 24 rows 2-4 %, at 32 none; chunks of 48 or 96 did no
// better, and at 64 rows chunks cost 5-7 % more, hence kChunkedPasses (docs/benchmarks.md, run 60).
constexpr int64_t kChunk = 64;

#if defined(__AVX512F__)
// 32 registers: 3 blocks x 8 rows = 24 accumulators, 3 weight vectors, a broadcast
using Vec = __m512;
constexpr int64_t kWidth = 16;  // floats a vector holds
constexpr int64_t kGroup = 3;   // column blocks a pass multiplies
constexpr int64_t kPassRows = 8;
constexpr int64_t kChunkedPasses = 4;  // products of 2 .. this many passes go a chunk at a time
inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline Vec vbroadcast(float v) { return _mm512_set1_ps(v); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
// 16 bfloat16 (their bits) -> float32: the bits move to the upper half of each lane
inline Vec vload(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
#elif defined(__AVX2__) && defined(__FMA__)
// 16 registers: 1 block (2 vectors) x 6 rows = 12 accumulators, 2 weight vectors, a broadcast
using Vec = __m256;
constexpr int64_t kWidth = 8;
constexpr int64_t kGroup = 1;
constexpr int64_t kPassRows = 6;
constexpr int64_t kChunkedPasses = 1;  // unmeasured on an AVX2 CPU: a group whole, as before
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vbroadcast(float v) { return _mm256_set1_ps(v); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vload(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
#else
#error "build with -mavx512f -mfma or -mavx2 -mfma"
#endif
constexpr int kPerBlock = int(kLanes / kWidth);  // vectors in a block's k-step

// The output columns of accumulator vector v of a group (kPerBlock vectors a block).
constexpr int64_t column(int v) { return (v / kPerBlock) * kLanes + (v % kPerBlock) * kWidth; }

// One k-step: the NC blocks' weights at step k (a block's k-steps kLanes apart, its blocks K * kLanes) times
// each row's x[k], added to acc.
template <int MR, int NC, typename W>
inline __attribute__((always_inline)) void k_step(Vec (&acc)[MR][NC * kPerBlock], const float* __restrict x,
                                                  int64_t ldx, const W* __restrict w, int64_t K, int64_t k) {
  constexpr int V = NC * kPerBlock;
  Vec wv[V];
  for (int j = 0; j < NC; ++j)
    for (int h = 0; h < kPerBlock; ++h) wv[j * kPerBlock + h] = vload(w + j * K * kLanes + k * kLanes + h * kWidth);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const Vec xb = vbroadcast(x[i * ldx + k]);
    for (int v = 0; v < V; ++v) acc[i][v] = vfma(xb, wv[v], acc[i][v]);
  }
}

// acc into rows [0, MR) of y, plus the bias where one is given, then plus add's rows where given (add: y's
// layout; each sum rounded as PyTorch's separate additions round it).
template <int MR, int V>
inline __attribute__((always_inline)) void store(Vec (&acc)[MR][V], float* __restrict y, int64_t ldy,
                                                 const float* __restrict bias, const float* __restrict add) {
  for (int v = 0; v < V; ++v) {
    const Vec b = bias ? vload(bias + column(v)) : vzero();
    for (int i = 0; i < MR; ++i) {
      const Vec out = bias ? vadd(acc[i][v], b) : acc[i][v];
      vstore(y + i * ldy + column(v), add ? vadd(out, vload(add + i * ldy + column(v))) : out);
    }
  }
}

// Rows [0, MR) of x (row-major: x[row * ldx + k]) times NC adjacent column blocks starting at w (W: float,
// or uint16_t holding bfloat16 bits).  A k-step broadcasts one value from each row; a row's cache line serves
// 16 k-steps, so the MR lines a pass reads stay in L1 without copying x transposed first.
template <int MR, int NC, typename W>
void block(const float* __restrict x, int64_t ldx, const W* __restrict w, int64_t K, float* __restrict y,
           int64_t ldy, const float* __restrict bias, const float* __restrict add, bool own, const W* next,
           int64_t next_blocks, int64_t every, int64_t first_line) {
  // own: prefetch this stream kAhead steps ahead; next (nullptr: none): the next group's first block, of
  // next_blocks blocks, one of whose lines (k-steps) is prefetched every ``every`` steps from first_line
  constexpr int V = NC * kPerBlock;  // vectors across the group's blocks
  Vec acc[MR][V];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = vzero();
  int64_t count = 0, line = first_line;
  for (int64_t k = 0; k < K; ++k) {
    if (own)
      for (int j = 0; j < NC; ++j) _mm_prefetch((const char*)(w + j * K * kLanes + (k + kAhead) * kLanes), _MM_HINT_T0);
    if (next && ++count == every) {
      count = 0;
      if (line < K)
        for (int64_t j = 0; j < next_blocks; ++j)
          _mm_prefetch((const char*)(next + j * K * kLanes + line * kLanes), _MM_HINT_T0);
      ++line;
    }
    k_step<MR, NC>(acc, x, ldx, w, K, k);
  }
  store(acc, y, ldy, bias, add);
}

template <typename W>
using BlockFn = void (*)(const float*, int64_t, const W*, int64_t, float*, int64_t, const float*, const float*,
                         bool, const W*, int64_t, int64_t, int64_t);

template <int NC, typename W, int... R>
constexpr std::array<BlockFn<W>, sizeof...(R)> rows_table(std::integer_sequence<int, R...>) {
  return {block<R + 1, NC, W>...};
}

template <typename W>
struct Tables {
  static constexpr auto whole = rows_table<int(kGroup), W>(std::make_integer_sequence<int, int(kPassRows)>{});
  static constexpr auto single = rows_table<1, W>(std::make_integer_sequence<int, int(kPassRows)>{});
};

// Rows [0, m) of x (row-major, row stride k) times every block of packed into y (row stride ldy), plus
// the bias bp and the rows of ap (y's layout) where given.
template <typename W>
void multiply(const float* xp, int64_t m, const W* wp, int64_t k, int64_t blocks, float* yp, int64_t ldy,
              const float* bp, const float* ap) {
  const int64_t passes = (m + kPassRows - 1) / kPassRows;
  const int64_t pass_rows = (m + passes - 1) / passes;  // the passes balanced
  const int64_t lines_a_pass = (k + passes - 1) / passes;
  const int64_t groups = (blocks + kGroup - 1) / kGroup;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t first = g * kGroup, count = std::min(kGroup, blocks - first);
      const W* w = wp + first * k * kLanes;
      // with several passes, the thread's next group is prefetched a share a pass
      const bool spread = passes > 1 && g + 1 < g1;
      const W* next = spread ? w + kGroup * k * kLanes : nullptr;
      const int64_t next_blocks = spread ? std::min(kGroup, blocks - first - kGroup) : 0;
      for (int64_t p = 0, r = 0; r < m; ++p, r += pass_rows) {
        const int64_t rows = std::min(pass_rows, m - r);
        const bool own = p == 0 && (passes == 1 || g == g0);
        if (count == kGroup) {
          Tables<W>::whole[rows - 1](xp + r * k, k, w, k, yp + r * ldy + first * kLanes, ldy, bp ? bp + first * kLanes : nullptr,
                           ap ? ap + r * ldy + first * kLanes : nullptr, own, next, next_blocks, passes, p * lines_a_pass);
        } else {  // the last group, short of blocks: one block at a time
          for (int64_t j = 0; j < count; ++j)
            Tables<W>::single[rows - 1](xp + r * k, k, w + j * k * kLanes, k, yp + r * ldy + (first + j) * kLanes, ldy,
                              bp ? bp + (first + j) * kLanes : nullptr,
                              ap ? ap + r * ldy + (first + j) * kLanes : nullptr, p == 0, nullptr, 0, 1, 0);
        }
      }
    }
  });
}

// Rows [0, MR) of x times NC column blocks over the KN k-steps of one chunk (x and w point at the chunk's
// first k-step; a block's k-steps are kLanes apart, its blocks K * kLanes).  first: the sums start at 0,
// else at the partial sums the chunks before left in partial (row stride kGroup * kLanes); last: the bias
// and add's rows (where given) are added and the sums go to y, else back to partial.  Lines [line, line +
// lines) of the nb blocks at np (the next chunk) are prefetched, spread over the chunk.
template <int MR, int NC>
void chunk(const float* __restrict x, int64_t ldx, const float* __restrict w, int64_t K, int64_t KN,
           float* __restrict y, int64_t ldy, const float* __restrict bias, const float* __restrict add, bool first,
           bool last, const float* np, int64_t nb, int64_t line, int64_t lines, float* __restrict partial) {
  constexpr int V = NC * kPerBlock;
  constexpr int64_t lp = kGroup * kLanes;  // partial's row stride
  Vec acc[MR][V];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = first ? vzero() : vload(partial + i * lp + column(v));
  // a prefetch every ``every`` k-steps, the first at k = 0, counted down: ``k % every`` would put a 64-bit
  // division beside every step's multiply-adds (a 32-row verification about 5 % slower)
  const int64_t every = lines > 0 ? std::max<int64_t>(1, KN / lines) : 0;
  int64_t due = lines > 0 ? 1 : KN + 1;
  for (int64_t k = 0; k < KN; ++k) {
    if (--due == 0) {
      for (int64_t j = 0; j < nb; ++j) _mm_prefetch((const char*)(np + j * K * kLanes + line * kLanes), _MM_HINT_T0);
      ++line;
      due = --lines > 0 ? every : KN + 1;
    }
    k_step<MR, NC>(acc, x, ldx, w, K, k);
  }
  for (; lines > 0; --lines, ++line)
    for (int64_t j = 0; j < nb; ++j) _mm_prefetch((const char*)(np + j * K * kLanes + line * kLanes), _MM_HINT_T0);
  if (last)
    store(acc, y, ldy, bias, add);
  else
    store(acc, partial, lp, nullptr, nullptr);
}

using ChunkFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t, const float*,
                         const float*, bool, bool, const float*, int64_t, int64_t, int64_t, float*);

template <int NC, int... R>
constexpr std::array<ChunkFn, sizeof...(R)> chunk_table(std::integer_sequence<int, R...>) {
  return {chunk<R + 1, NC>...};
}

struct ChunkTables {
  static constexpr auto whole = chunk_table<int(kGroup)>(std::make_integer_sequence<int, int(kPassRows)>{});
  static constexpr auto single = chunk_table<1>(std::make_integer_sequence<int, int(kPassRows)>{});
};

// Every pass (``passes`` of pass_rows rows over x's m rows of k values) over one chunk, k-steps [kc, kc + kn),
// of a group of ``count`` blocks whose outputs start ``first`` blocks into y: block j's chunk at w + j * K *
// kLanes (K: a block's stride in k-steps).  partial: each pass's sums between chunks.  Lines [nline, nline +
// nlen) of the nb blocks at np (the next chunk; np null: none) are prefetched, a share a pass.
inline __attribute__((always_inline)) void chunk_passes(const float* xp, int64_t m, int64_t passes, int64_t pass_rows,
                                                        int64_t k, int64_t kc, int64_t kn, const float* w, int64_t K,
                                                        int64_t count, int64_t first, float* yp, int64_t ldy,
                                                        const float* bp, const float* ap, float* partial,
                                                        const float* np, int64_t nb, int64_t nline, int64_t nlen) {
  const int64_t share = (nlen + passes - 1) / passes;
  for (int64_t p = 0, r = 0; r < m; ++p, r += pass_rows) {
    const int64_t rows = std::min(pass_rows, m - r);
    const int64_t line = nline + std::min(nlen, p * share), lines = std::clamp(nlen - p * share, int64_t{0}, share);
    const float* x = xp + r * k + kc;
    float* part = partial + p * kPassRows * kGroup * kLanes;
    if (count == kGroup) {
      ChunkTables::whole[rows - 1](x, k, w, K, kn, yp + r * ldy + first * kLanes, ldy,
                                   bp ? bp + first * kLanes : nullptr, ap ? ap + r * ldy + first * kLanes : nullptr,
                                   kc == 0, kc + kn == k, np, nb, line, lines, part);
    } else {  // the last group, short of blocks: one block at a time (the first prefetches)
      for (int64_t j = 0; j < count; ++j)
        ChunkTables::single[rows - 1](x, k, w + j * K * kLanes, K, kn, yp + r * ldy + (first + j) * kLanes, ldy,
                                      bp ? bp + (first + j) * kLanes : nullptr,
                                      ap ? ap + r * ldy + (first + j) * kLanes : nullptr, kc == 0, kc + kn == k,
                                      j == 0 ? np : nullptr, nb, line, j == 0 ? lines : 0, part + j * kLanes);
    }
  }
}

// multiply's work for float32 weights and 2 .. kChunkedPasses passes, a group a chunk at a time: every pass
// over a chunk, then the next chunk (this group's, or the thread's next group's first), whose lines the
// passes prefetch a share each.
void multiply_chunked(const float* xp, int64_t m, const float* wp, int64_t k, int64_t blocks, float* yp, int64_t ldy,
                      const float* bp, const float* ap) {
  const int64_t passes = (m + kPassRows - 1) / kPassRows;
  const int64_t pass_rows = (m + passes - 1) / passes;
  const int64_t groups = (blocks + kGroup - 1) / kGroup;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    // each pass's partial sums between chunks, [passes][kPassRows][kGroup * kLanes]: 6 KB that stay in L1
    // (y's rows lie a row of outputs apart, 12 KB in a 3,072-wide product)
    alignas(64) float partial[kChunkedPasses * kPassRows * kGroup * kLanes];
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t first = g * kGroup, count = std::min(kGroup, blocks - first);
      const float* w = wp + first * k * kLanes;
      for (int64_t kc = 0; kc < k; kc += kChunk) {
        const int64_t kn = std::min(kChunk, k - kc);
        const float* np = nullptr;  // the next chunk: nb blocks, its lines [nline, nline + nlen)
        int64_t nb = 0, nline = 0, nlen = 0;
        if (kc + kn < k) {
          np = w, nb = count, nline = kc + kn, nlen = std::min(kChunk, k - kc - kn);
        } else if (g + 1 < g1) {
          np = w + count * k * kLanes, nb = std::min(kGroup, blocks - first - count), nlen = std::min(kChunk, k);
        }
        chunk_passes(xp, m, passes, pass_rows, k, kc, kn, w + kc * kLanes, k, count, first, yp, ldy, bp, ap, partial, np,
                     nb, nline, nlen);
      }
    }
  });
}

// ---- exact codes of a float32 weight dequantized from 4- or 8-bit blocks ----
constexpr int64_t kSegment = 32;  // inputs of an output sharing one scale (and offset)
#ifndef CODES_AHEAD
#define CODES_AHEAD 1
#endif
constexpr int64_t kCodesAhead = CODES_AHEAD;  // chunks ahead a chunk's codes are prefetched
static_assert(kChunk % kSegment == 0, "a chunk holds whole segments");

// Whether two floats have the same bits (so -0 is not +0).
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// The float16 values around ``estimate`` (GGUF rounds its scales to float16), the first that ``fits``; -1
// where none does.
template <typename Fits>
float half_scale(float estimate, Fits& fits) {
  const int base = c10::Half(estimate).x;
  for (int off : {0, 1, -1, 2, -2, 3, -3}) {
    const int bits = base + off;
    if (bits <= 0 || bits >= 0x7c00) continue;  // positive, finite float16 only
    const float d = static_cast<float>(c10::Half(static_cast<uint16_t>(bits), c10::Half::from_bits()));
    if (fits(d)) return d;
  }
  return -1.0f;
}

// fl(fl(d * q) + m) per lane, q in 0..15 (GGUF's Q4_1).  A segment of a block: 16 pairs of k-steps x 16 lanes
// of two codes each (the low nibble the even k-step), then the lanes' 16 float32 scales d and 16 offsets m.
struct Four {
  static constexpr int64_t kCodeBytes = kSegment / 2 * kLanes;
  static constexpr int64_t kBytes = kCodeBytes + 2 * kLanes * 4;

  // out[k * kLanes + lane] for the segment's 32 k-steps: a rounded multiply, then a rounded add (the build
  // has -ffp-contract=off)
  static void decode(const uint8_t* __restrict seg, float* __restrict out) {
    const float* dp = reinterpret_cast<const float*>(seg + kCodeBytes);
#if defined(__AVX512F__)
    const __m512 d = _mm512_loadu_ps(dp), m = _mm512_loadu_ps(dp + kLanes);
    const __m512i low = _mm512_set1_epi32(15);
    for (int64_t p = 0; p < kSegment / 2; ++p) {
      const __m512i pair = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(seg + p * kLanes)));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(pair, low));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(pair, 4));
      _mm512_store_ps(out + 2 * p * kLanes, _mm512_add_ps(_mm512_mul_ps(d, lo), m));
      _mm512_store_ps(out + (2 * p + 1) * kLanes, _mm512_add_ps(_mm512_mul_ps(d, hi), m));
    }
#else
    const __m256i low = _mm256_set1_epi32(15);
    for (int64_t h = 0; h < kLanes; h += 8) {
      const __m256 d = _mm256_loadu_ps(dp + h), m = _mm256_loadu_ps(dp + kLanes + h);
      for (int64_t p = 0; p < kSegment / 2; ++p) {
        const __m256i pair =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(seg + p * kLanes + h)));
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(pair, low));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(pair, 4));
        _mm256_store_ps(out + 2 * p * kLanes + h, _mm256_add_ps(_mm256_mul_ps(d, lo), m));
        _mm256_store_ps(out + (2 * p + 1) * kLanes + h, _mm256_add_ps(_mm256_mul_ps(d, hi), m));
      }
    }
#endif
  }

  // Lane ``lane`` of seg from one output's 32 values, where some scale d and the offset m = their least
  // give every value back (Q4_1 stores d and m as float16, d near (max - min) / 15: the float16 values
  // around that are tried); false where none does.
  static bool derive(const float* v, uint8_t* seg, int64_t lane) {
    float lo = v[0], hi = v[0];
    for (int64_t i = 0; i < kSegment; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
    uint8_t q[kSegment];
    auto fits = [&](float d) {
      for (int64_t i = 0; i < kSegment; ++i) {
        const float code = std::clamp(d > 0 ? std::nearbyint((v[i] - lo) / d) : 0.0f, 0.0f, 15.0f);
        const volatile float scaled = d * code;  // two roundings, whatever the compiler's contraction
        if (!same_bits(scaled + lo, v[i])) return false;
        q[i] = static_cast<uint8_t>(code);
      }
      return true;
    };
    const float d = hi == lo ? (fits(0.0f) ? 0.0f : -1.0f) : half_scale((hi - lo) / 15.0f, fits);
    if (d < 0) return false;
    for (int64_t p = 0; p < kSegment / 2; ++p) seg[p * kLanes + lane] = uint8_t(q[2 * p] | (q[2 * p + 1] << 4));
    float* scales = reinterpret_cast<float*>(seg + kCodeBytes);
    scales[lane] = d, scales[kLanes + lane] = lo;
    return true;
  }
};

// fl(d * q) per lane, q in -128..127 (GGUF's Q8_0).  A segment of a block: 32 k-steps x 16 lanes of one
// signed byte each, then the lanes' 16 float32 scales.
struct Eight {
  static constexpr int64_t kCodeBytes = kSegment * kLanes;
  static constexpr int64_t kBytes = kCodeBytes + kLanes * 4;

  static void decode(const uint8_t* __restrict seg, float* __restrict out) {
    const float* dp = reinterpret_cast<const float*>(seg + kCodeBytes);
#if defined(__AVX512F__)
    const __m512 d = _mm512_loadu_ps(dp);
    for (int64_t k = 0; k < kSegment; ++k) {
      const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(seg + k * kLanes)));
      _mm512_store_ps(out + k * kLanes, _mm512_mul_ps(d, _mm512_cvtepi32_ps(q)));
    }
#else
    for (int64_t h = 0; h < kLanes; h += 8) {
      const __m256 d = _mm256_loadu_ps(dp + h);
      for (int64_t k = 0; k < kSegment; ++k) {
        const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(seg + k * kLanes + h)));
        _mm256_store_ps(out + k * kLanes + h, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
      }
    }
#endif
  }

  // Q8_0 stores d as float16 near max |v| / 127
  static bool derive(const float* v, uint8_t* seg, int64_t lane) {
    float top = 0.0f;
    for (int64_t i = 0; i < kSegment; ++i) top = std::max(top, std::fabs(v[i]));
    int8_t q[kSegment];
    auto fits = [&](float d) {
      for (int64_t i = 0; i < kSegment; ++i) {
        const float code = std::clamp(d > 0 ? std::nearbyint(v[i] / d) : 0.0f, -128.0f, 127.0f);
        if (!same_bits(d * code, v[i])) return false;
        q[i] = static_cast<int8_t>(code);
      }
      return true;
    };
    const float d = top == 0.0f ? (fits(0.0f) ? 0.0f : -1.0f) : half_scale(top / 127.0f, fits);
    if (d < 0) return false;
    for (int64_t k = 0; k < kSegment; ++k) seg[k * kLanes + lane] = static_cast<uint8_t>(q[k]);
    reinterpret_cast<float*>(seg + kCodeBytes)[lane] = d;
    return true;
  }
};

// multiply's work for a weight in codes of format F ([blocks][k / kSegment][F::kBytes]): a group a chunk at a
// time, the chunk decoded into the thread's scratch ([kGroup][kChunk][kLanes]) and every pass run over it by
// the float32 chunk passes (the codes kCodesAhead chunks on prefetched first).
template <typename F>
void multiply_codes(const float* xp, int64_t m, const uint8_t* wp, int64_t k, int64_t blocks, float* yp, int64_t ldy,
                    const float* bp, const float* ap) {
  const int64_t passes = (m + kPassRows - 1) / kPassRows;
  const int64_t pass_rows = (m + passes - 1) / passes;
  const int64_t groups = (blocks + kGroup - 1) / kGroup;
  const int64_t block_bytes = k / kSegment * F::kBytes;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    alignas(64) float scratch[kGroup * kChunk * kLanes];
    std::vector<float> partial(passes * kPassRows * kGroup * kLanes);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t first = g * kGroup, count = std::min(kGroup, blocks - first);
      const uint8_t* w = wp + first * block_bytes;
      for (int64_t kc = 0; kc < k; kc += kChunk) {
        const int64_t kn = std::min(kChunk, k - kc);
        // the chunk kCodesAhead chunks on in the thread's order (this group's, then its next groups')
        int64_t ag = g, ak = kc;
        for (int64_t a = 0; a < kCodesAhead; ++a)
          if ((ak += kChunk) >= k) ak = 0, ++ag;
        if (kCodesAhead > 0 && ag < g1) {
          const uint8_t* ahead = wp + ag * kGroup * block_bytes + ak / kSegment * F::kBytes;
          const int64_t ahead_bytes = std::min(kChunk, k - ak) / kSegment * F::kBytes;
          for (int64_t j = 0; j < std::min(kGroup, blocks - ag * kGroup); ++j)
            for (int64_t b = 0; b < ahead_bytes; b += 64) _mm_prefetch((const char*)(ahead + j * block_bytes + b), _MM_HINT_T0);
        }
        for (int64_t j = 0; j < count; ++j)
          for (int64_t s = 0; s < kn / kSegment; ++s)
            F::decode(w + j * block_bytes + (kc / kSegment + s) * F::kBytes, scratch + (j * kChunk + s * kSegment) * kLanes);
        chunk_passes(xp, m, passes, pass_rows, k, kc, kn, scratch, kChunk, count, first, yp, ldy, bp, ap, partial.data(),
                     nullptr, 0, 0, 0);
      }
    }
  });
}

// W [N, K] float32 -> its codes in format F, uint8 [ceil(N / 16), K / 32, F::kBytes] (outputs past N decode to
// 0), where every weight is derived (F::derive); else an undefined tensor.
template <typename F>
torch::Tensor pack_as(const float* wp, int64_t n, int64_t k) {
  const int64_t blocks = (n + kLanes - 1) / kLanes, segments = k / kSegment;
  auto out = torch::zeros({blocks, segments, F::kBytes}, torch::kUInt8);
  uint8_t* op = out.template data_ptr<uint8_t>();
  std::atomic<bool> ok{true};
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1 && ok.load(std::memory_order_relaxed); ++b)
      for (int64_t s = 0; s < segments; ++s)
        for (int64_t l = 0; l < kLanes && b * kLanes + l < n; ++l)
          if (!F::derive(wp + (b * kLanes + l) * k + s * kSegment, op + (b * segments + s) * F::kBytes, l)) {
            ok = false;
            return;
          }
  });
  return ok ? out : torch::Tensor();
}

}  // namespace

// W [N, K] float32 or bfloat16 -> [ceil(N / 16), K, 16] of its dtype, outputs past N zero.
torch::Tensor pack(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && (weight.scalar_type() == torch::kFloat32 || weight.scalar_type() == torch::kBFloat16),
              "a 2-d float32 or bfloat16 weight");
  const int64_t n = weight.size(0), k = weight.size(1), blocks = (n + kLanes - 1) / kLanes;
  auto padded = torch::zeros({blocks * kLanes, k}, weight.options());
  padded.narrow(0, 0, n).copy_(weight);
  return padded.view({blocks, kLanes, k}).transpose(1, 2).contiguous();
}

// x [M, K] float32, packed from ``pack``, bias [N] or None, add [M, N] float32 or None -> [M, N]: x @ W.T,
// plus the bias, plus add (a residual: PyTorch's residual + output has the same bits).
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out_features,
                     const c10::optional<torch::Tensor>& bias, const c10::optional<torch::Tensor>& add) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x: [rows, in_features] float32");
  const bool codes = packed.scalar_type() == torch::kUInt8;
  TORCH_CHECK(packed.dim() == 3 &&
                  (codes ? packed.size(1) * kSegment == x.size(1) &&
                               (packed.size(2) == Four::kBytes || packed.size(2) == Eight::kBytes)
                         : packed.size(1) == x.size(1) && packed.size(2) == kLanes),
              "a packed weight of x's width");
  const bool half = packed.scalar_type() == torch::kBFloat16;
  TORCH_CHECK(codes || half || packed.scalar_type() == torch::kFloat32, "a float32, bfloat16 or coded packed weight");
  const int64_t m = x.size(0), k = x.size(1), blocks = packed.size(0), width = blocks * kLanes;
  TORCH_CHECK(out_features <= width, "out_features beyond the packed weight");
  auto y = torch::empty({m, width}, x.options());
  if (m == 0) return y.narrow(1, 0, out_features);
  torch::Tensor a;  // the residual in y's layout (a copy only where the outputs are padded)
  if (add.has_value() && add->defined()) {
    TORCH_CHECK(add->scalar_type() == torch::kFloat32 && add->dim() == 2 && add->size(0) == m &&
                    add->size(1) == out_features,
                "add: float32 [rows, out_features]");
    a = add->contiguous();
    if (width != out_features) {
      a = torch::zeros({m, width}, x.options());
      a.narrow(1, 0, out_features).copy_(*add);
    }
  }
  const float* ap = a.defined() ? a.data_ptr<float>() : nullptr;
  torch::Tensor b;
  if (bias.has_value() && bias->defined()) {  // padded to whole blocks only where the outputs are not
    b = bias->contiguous();
    if (width != out_features) {
      b = torch::zeros({width}, x.options());
      b.narrow(0, 0, out_features).copy_(*bias);
    }
  }
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // A tile's rows stay in the core's own cache while every block of weights passes them: all of x at once
  // is read again for every block, from memory once x outgrows the last-level cache (two layers' products
  // on the AVX2 EPYC: 1.2x the tiles' time at 512 rows, 1.8x at 1,024, 2.3x at 2,048).
  const auto xc = x.contiguous();
  const float* xp = xc.data_ptr<float>();
  const int64_t tile = m > kTileAbove ? std::max<int64_t>(kPassRows, kTileBytes / (k * 4) / kPassRows * kPassRows) : m;
  for (int64_t t = 0; t < m; t += tile) {
    const int64_t rows = std::min(tile, m - t);
    const int64_t passes = (rows + kPassRows - 1) / kPassRows;
    const float* addend = ap ? ap + t * width : nullptr;
    if (codes)
      (packed.size(2) == Four::kBytes ? multiply_codes<Four> : multiply_codes<Eight>)(
          xp + t * k, rows, packed.data_ptr<uint8_t>(), k, blocks, yp + t * width, width, bp, addend);
    else if (half)
      multiply(xp + t * k, rows, reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>()), k, blocks,
               yp + t * width, width, bp, addend);
    else if (passes > 1 && passes <= kChunkedPasses)
      multiply_chunked(xp + t * k, rows, packed.data_ptr<float>(), k, blocks, yp + t * width, width, bp, addend);
    else
      multiply(xp + t * k, rows, packed.data_ptr<float>(), k, blocks, yp + t * width, width, bp, addend);
  }
  return out_features == width ? y : y.narrow(1, 0, out_features).contiguous();
}

// W [N, K] float32 -> the codes it was dequantized from, uint8 [ceil(N / 16), K / 32, bytes a segment]: GGUF's
// Q4_1 (``Four``, 384 bytes a segment of a block of 16 outputs) or Q8_0 (``Eight``, 576), the first whose
// decoding gives every weight back with its bits; else (or K no multiple of 32, or a NaN) an undefined tensor.
torch::Tensor pack_codes(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat32, "a 2-d float32 weight");
  const int64_t n = weight.size(0), k = weight.size(1);
  const auto w = weight.contiguous();
  if (k == 0 || k % kSegment != 0 || n == 0 || w.isnan().any().item<bool>()) return torch::Tensor();
  auto codes = pack_as<Four>(w.data_ptr<float>(), n, k);
  return codes.defined() ? codes : pack_as<Eight>(w.data_ptr<float>(), n, k);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "lay a float32 or bfloat16 weight out in column blocks of 16", py::call_guard<py::gil_scoped_release>());
  m.def("pack_codes", &pack_codes, "the 4- or 8-bit codes a float32 weight was dequantized from, or None",
        py::call_guard<py::gil_scoped_release>());
  m.def("linear", &linear, "x @ W.T + bias (+ add) from a packed W", py::arg("x"), py::arg("packed"),
        py::arg("out_features"), py::arg("bias") = py::none(), py::arg("add") = py::none(),
        py::call_guard<py::gil_scoped_release>());
}
