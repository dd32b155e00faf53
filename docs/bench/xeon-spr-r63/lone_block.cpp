#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cstdint>
using Vec = __m512;
constexpr int64_t kLanes = 16, kWidth = 16, kPerBlock = 1;
template <int MR, int NC>
__attribute__((noinline)) void block(const float* __restrict x, int64_t ldx, const float* __restrict w, int64_t K, float* __restrict y, int64_t ldy) {
  Vec acc[MR][NC];
  for (int i = 0; i < MR; ++i) for (int v = 0; v < NC; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    Vec wv[NC];
    for (int j = 0; j < NC; ++j) wv[j] = _mm512_loadu_ps(w + j * K * kLanes + k * kLanes);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const Vec xb = _mm512_set1_ps(x[i * ldx + k]);
      for (int v = 0; v < NC; ++v) acc[i][v] = _mm512_fmadd_ps(xb, wv[v], acc[i][v]);
    }
  }
  for (int v = 0; v < NC; ++v) for (int i = 0; i < MR; ++i) _mm512_storeu_ps(y + i * ldy + v * 16, acc[i][v]);
}
template <int MR, int NC> void run(int64_t K) {
  std::vector<float> x(MR * K, 1.0f), w(NC * K * 16, 0.5f), y(MR * 128);
  long reps = 2000000000L / (2L * MR * NC * 16 * K);
  double best = 1e9;
  for (int t = 0; t < 5; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    for (long r = 0; r < reps; ++r) block<MR, NC>(x.data(), K, w.data(), K, y.data(), 128);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt < best) best = dt;
  }
  printf("MR=%d NC=%d K=%ld: %.0f GFLOPS one thread (%.0f%% of 245)\n", MR, NC, (long)K, 2.0 * MR * NC * 16 * K * reps / best / 1e9, 2.0 * MR * NC * 16 * K * reps / best / 1e9 / 2.45);
}
int main() {
  run<8, 3>(64); run<8, 3>(576);
  run<12, 2>(64);
  run<4, 6>(576); run<12, 2>(576); run<14, 2>(576);
}
