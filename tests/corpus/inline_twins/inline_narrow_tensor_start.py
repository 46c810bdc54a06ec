# expect: runtime_error no_gpu
# problem: embedding_gather
# twin: adversarial/inline_narrow_tensor_start.py
# the gather in a kernel; the host code uses narrow() and select() with integer arguments only
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>

// one kernel per dtype the problem is judged in (bf16 on the GPU; float32 at the CPU's sizes)
__global__ void gather_bf16(const __nv_bfloat16* table, const long* ids, __nv_bfloat16* out, int n, int dim) {
    int row = blockIdx.x;
    if (row >= n) return;
    const __nv_bfloat16* src = table + ids[row] * (long)dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) out[(long)row * dim + c] = src[c];
}

__global__ void gather_f32(const float* table, const long* ids, float* out, int n, int dim) {
    int row = blockIdx.x;
    if (row >= n) return;
    const float* src = table + ids[row] * (long)dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) out[(long)row * dim + c] = src[c];
}

torch::Tensor gather(torch::Tensor table, torch::Tensor ids) {
    auto flat = ids.reshape({-1}).contiguous();
    auto out = torch::empty({flat.size(0), table.size(1)}, table.options());
    TORCH_CHECK(out.narrow(0, 0, 1).select(0, 0).numel() == table.size(1), "row size");
    int n = (int)flat.size(0), dim = (int)table.size(1);
    if (table.scalar_type() == torch::kBFloat16) {
        gather_bf16<<<n, 128>>>(table.data_ptr<__nv_bfloat16>(), flat.data_ptr<int64_t>(), out.data_ptr<__nv_bfloat16>(),
                                n, dim);
    } else {
        gather_f32<<<n, 128>>>(table.data_ptr<float>(), flat.data_ptr<int64_t>(), out.data_ptr<float>(), n, dim);
    }
    return out.view({ids.size(0), ids.size(1), table.size(1)});
}
"""
cpp_src = "torch::Tensor gather(torch::Tensor table, torch::Tensor ids);"

ext = load_inline(name="gather_honest", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["gather"])


class ModelNew(nn.Module):
    def __init__(self, vocab, dim, dtype):
        super().__init__()
        self.table = nn.Embedding(vocab, dim, dtype=dtype)

    def forward(self, ids):
        return ext.gather(self.table.weight, ids)
