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
#include <tuple>
#include <vector>

namespace {
constexpr int64_t kRowsPerTask = 16;  // rows a thread takes at a time (a prompt's prefill)
}

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
  for (int64_t i = 0, n = rows * h; i < n; ++i) op[i] = xp[i] * xp[i];  // pow(2): x * x
  const auto sums = at::sum(out.view({rows, h}), {1});
  const float* sp = sums.data_ptr<float>();
  // the scalars as PyTorch applies them to a float32 tensor: eps and the count cast to float32
  const float e = static_cast<float>(eps), count = static_cast<float>(h);
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float variance = sp[r] / count;
      const float inverse = 1.0f / std::sqrt(variance + e);  // rsqrt: a rounded root, then a rounded quotient
      const float* xr = xp + r * h;
      float* o = op + r * h;
      for (int64_t i = 0; i < h; ++i) {
        const float scaled = xr[i] * inverse;
        o[i] = wp[i] * scaled;
      }
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
  at::parallel_for(0, b * rows, kRowsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t br = first; br < last; ++br) {
      const int64_t i = br / rows, r = br % rows;
      const float* cr = cp + i * angle_batch + r * d;
      const float* sr = sp + i * angle_batch + r * d;
      for (int64_t hd = 0; hd < heads; ++hd) {
        const float* xr = xp + i * batch_stride + r * row_stride + hd * d;
        float* o = op + (br * heads + hd) * d;
        for (int64_t k = 0; k < half; ++k) {
          const float straight = xr[k] * cr[k];
          const float turned = (-xr[k + half]) * sr[k];
          o[k] = straight + turned;
        }
        for (int64_t k = half; k < d; ++k) {
          const float straight = xr[k] * cr[k];
          const float turned = xr[k - half] * sr[k];
          o[k] = straight + turned;
        }
      }
    }
  });
  return out;
}

// The block comparison is built for AVX-512, AVX2 and the baseline, the loader picking the best this CPU
// runs (GCC's and Clang's function multiversioning, x86 only); elsewhere the baseline alone.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PICK_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PICK_CLONES
#endif

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

// x [R, V] float32, 1 <= k <= V -> (values [R, k], ids int64 [R, k]): each row's k largest, best first,
// equal values in index order; torch.topk's values, its ids wherever the row has no ties among them.  A
// row with a NaN gets torch.topk's answer.
std::tuple<torch::Tensor, torch::Tensor> row_topk(const torch::Tensor& x, int64_t k) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.dim() == 2 && k >= 1 && k <= x.size(1),
              "float32 x [R, V] and 1 <= k <= V");
  const auto xc = x.contiguous();
  const int64_t rows = xc.size(0), n = xc.size(1);
  auto values = torch::empty({rows, k}, xc.options());
  auto ids = torch::empty({rows, k}, xc.options().dtype(torch::kInt64));
  const float* xp = xc.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<char> with_nan(rows, 0);
  at::parallel_for(0, rows, kRowsPerPickTask, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) with_nan[r] = !row_top(xp + r * n, n, k, vp + r * k, ip + r * k);
  });
  for (int64_t r = 0; r < rows; ++r) {
    if (!with_nan[r]) continue;
    auto top = xc[r].topk(k);
    values[r].copy_(std::get<0>(top));
    ids[r].copy_(std::get<1>(top));
  }
  return {values, ids};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "LlamaRMSNorm's float32 forward in one call", py::call_guard<py::gil_scoped_release>());
  m.def("rotary", &rotary, "x * cos + rotate_half(x) * sin in one call", py::call_guard<py::gil_scoped_release>());
  m.def("row_argmax", &row_argmax, "torch.argmax(x, dim=1) of float32 rows", py::call_guard<py::gil_scoped_release>());
  m.def("row_topk", &row_topk, "each float32 row's k largest, best first", py::call_guard<py::gil_scoped_release>());
}
