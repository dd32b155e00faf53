// A Llama layer's row-wise float32 glue in one call each, with the bits of transformers' own forward
// (talon/models/row_ops.py): the RMS norm and the rotary embedding of the query and key heads.
//
// A plain decoding step of a small model on a slow CPU spends much of its time outside the products:
// PyTorch dispatches each of the norm's eight operations and the rotary embedding's dozen separately,
// a few microseconds each.  Each loop here performs the same IEEE operations in the same order, each
// rounded to float32 (built with -ffp-contract=off: no multiply-add is fused), so every element gets the
// bits the separate operations give.  The one reduction, the norm's sum of squares, is PyTorch's own
// (at::sum, as torch.mean sums before it divides).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>

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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "LlamaRMSNorm's float32 forward in one call", py::call_guard<py::gil_scoped_release>());
  m.def("rotary", &rotary, "x * cos + rotate_half(x) * sin in one call", py::call_guard<py::gil_scoped_release>());
}
