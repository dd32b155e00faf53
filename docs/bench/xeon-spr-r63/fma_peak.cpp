#include <immintrin.h>
#include <chrono>
#include <cstdio>
template <int N, int DEPADD>
double run() {
  const long iters = 20000000;
  __m512 a[N]; __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < N; ++i) a[i] = _mm512_set1_ps(i);
  auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < iters; ++it) {
    __asm__ volatile("" : "+v"(b), "+v"(c));
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) a[i] = DEPADD ? _mm512_fmadd_ps(b, c, a[i]) : _mm512_fmadd_ps(a[i], b, c);
  }
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  __m512 s = a[0]; for (int i = 1; i < N; ++i) s = _mm512_add_ps(s, a[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  return 2.0 * 16 * N * iters / dt / 1e9;
}
int main() {
  printf("mul-dep N=24: %.0f\n", run<24, 0>());
  printf("add-dep N=24: %.0f\n", run<24, 1>());
  printf("add-dep N=8: %.0f\n", run<8, 1>());
  printf("add-dep N=16: %.0f\n", run<16, 1>());
  printf("mul-dep N=8: %.0f\n", run<8, 0>());
  printf("mul-dep N=4: %.0f\n", run<4, 0>());
}
