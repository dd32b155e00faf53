"""TALON's kernel (``talon/models/csrc/stream_gemm.cpp`` as it is) built standalone, without PyTorch, on one
thread, over a weight that stays in L2 (480 x 576): its float32 rate at 8 to 32 rows against the CPU's
multiply-add peak (``fma_peak.cpp``: about 220 GFLOPS a core here) and a lone 8-row block (``lone_block.cpp``).
Variants by -D: GROUP (column blocks a pass), PASSROWS (rows a pass), CHUNK (k-steps a chunk), CP (passes up to
which a group goes a chunk at a time).

    python docs/bench/xeon-spr-r63/standalone_passes.py
"""

import re
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
src = (ROOT / "talon/models/csrc/stream_gemm.cpp").read_text()
body = src[src.index("namespace {") : src.index("}  // namespace\n\n// W [N, K]")] + "}  // namespace\n"
body = body.replace("at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {", "[&](int64_t g0, int64_t g1) {")
body = body.replace("  });\n}", "  }(0, groups);\n}")
for name, macro in (("kGroup", "GROUP"), ("kPassRows", "PASSROWS"), ("kChunk", "CHUNK"), ("kChunkedPasses", "CP")):
    body = re.sub(rf"constexpr int64_t {name} = (\d+);", rf"constexpr int64_t {name} = {macro};", body, count=1)
body = body.replace("#pragma GCC unroll 8", "#pragma GCC unroll 16")  # a pass of more than 8 rows stays in registers
main = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char** argv) {
  const int64_t N = atol(argv[1]), K = atol(argv[2]), M = atol(argv[3]), blocks = (N + 15) / 16;
  std::vector<float> w(blocks * K * 16), x(M * K), y(M * blocks * 16);
  for (auto& v : w) v = (rand() % 1000) * 1e-4f;
  for (auto& v : x) v = (rand() % 1000) * 1e-3f;
  const int64_t passes = (M + kPassRows - 1) / kPassRows;
  const long reps = std::max<long>(1, (long)(4e9 / (2.0 * M * N * K)));
  double best = 1e9;
  for (int t = 0; t < 7; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    for (long r = 0; r < reps; ++r) {
      if (passes > 1 && passes <= kChunkedPasses) multiply_chunked(x.data(), M, w.data(), K, blocks, y.data(), blocks * 16, nullptr);
      else multiply(x.data(), M, w.data(), K, blocks, y.data(), blocks * 16, (const float*)nullptr);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  printf("%.0f", 2.0 * M * N * K / best / 1e9);
}
"""
head = "#include <immintrin.h>\n#include <algorithm>\n#include <array>\n#include <utility>\n#include <cstdint>\n"
work = Path(tempfile.mkdtemp())
(work / "k.cpp").write_text(head + body + main)
# for the timing only (wrong sums): a pass's accumulators never spilled to y and read back between chunks,
# and then also every pass reading the same rows of x
spill_free = body.replace("acc[i][v] = first ? vzero() : vload(y + i * ldy + column(v));", "acc[i][v] = vzero();")
spill_free = spill_free.replace("  store(acc, y, ldy, last ? bias : nullptr);\n}", "  if (last) store(acc, y, ldy, bias);\n}")
(work / "nospill.cpp").write_text(head + spill_free + main)
shared_x = spill_free.replace("const float* x = xp + r * k + kc;", "const float* x = xp + kc;")
(work / "sharedx.cpp").write_text(head + shared_x + main)
variants = {"as built (3 blocks, 8 rows, chunks of 64)": "-DGROUP=3 -DPASSROWS=8 -DCHUNK=64 -DCP=4",
            "chunks of 128": "-DGROUP=3 -DPASSROWS=8 -DCHUNK=128 -DCP=4",
            "no chunks": "-DGROUP=3 -DPASSROWS=8 -DCHUNK=64 -DCP=1",
            "2 blocks, 12 rows": "-DGROUP=2 -DPASSROWS=12 -DCHUNK=64 -DCP=4",
            "no spill between chunks (wrong sums)": "-DGROUP=3 -DPASSROWS=8 -DCHUNK=64 -DCP=4 nospill",
            "no spill, every pass the same x (wrong sums)": "-DGROUP=3 -DPASSROWS=8 -DCHUNK=64 -DCP=4 sharedx"}
for label, flags in variants.items():
    exe = work / re.sub(r"\W", "_", label)
    *defines, source = flags.split() if flags.split()[-1].isalpha() else (*flags.split(), "k")
    subprocess.run(["g++", "-O3", "-mavx512f", "-mfma", *defines, str(work / f"{source}.cpp"), "-o", str(exe)], check=True)
    rates = [subprocess.run([str(exe), "480", "576", str(m)], capture_output=True, text=True).stdout for m in (8, 12, 16, 24, 32)]
    print(f"{label:45s} GFLOPS at 8 / 12 / 16 / 24 / 32 rows: {' / '.join(rates)}", flush=True)
for name in ("fma_peak", "lone_block"):
    exe = work / name
    subprocess.run(["g++", "-O3", "-mavx512f", "-mfma", str(Path(__file__).with_name(name + ".cpp")), "-o", str(exe)], check=True)
    print(name + ":", subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip().replace("\n", "; "), flush=True)
