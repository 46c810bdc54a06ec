# expect: correct
# problem: embedding_gather
# format: load_inline
# KernelBench-v3 naming (class Model); int64 ids through ids.data_ptr<int64_t>(), output shape built from ids.sizes() plus the row width (std::vector<int64_t>), one block per token copying its table row with 16-byte uint4 moves, the nn.Embedding kept for its weight
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

embedding_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <vector>

// One block per token: copy table[ids[t], :] to out[t, :].
__global__ void embedding_rows_kernel(const int64_t* __restrict__ ids, const __nv_bfloat16* __restrict__ table,
                                      __nv_bfloat16* __restrict__ out, int64_t vocab, int dim) {
    const int64_t t = blockIdx.x;
    const int64_t id = ids[t];
    if (id < 0 || id >= vocab) return;  // nn.Embedding would raise; ids here are always in range
    const __nv_bfloat16* src = table + id * dim;
    __nv_bfloat16* dst = out + t * dim;
    if (dim % 8 == 0) {
        const uint4* s4 = reinterpret_cast<const uint4*>(src);
        uint4* d4 = reinterpret_cast<uint4*>(dst);
        for (int i = threadIdx.x; i < dim / 8; i += blockDim.x) d4[i] = s4[i];
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
    }
}

torch::Tensor embedding_forward(torch::Tensor ids, torch::Tensor table) {
    TORCH_CHECK(ids.is_cuda() && table.is_cuda(), "ids and table must be CUDA tensors");
    TORCH_CHECK(ids.scalar_type() == torch::kInt64, "ids must be int64");
    TORCH_CHECK(table.scalar_type() == torch::kBFloat16, "table must be bf16");
    auto ids_c = ids.contiguous();
    auto table_c = table.contiguous();
    const int64_t vocab = table_c.size(0);
    const int dim = table_c.size(1);

    std::vector<int64_t> out_sizes(ids_c.sizes().begin(), ids_c.sizes().end());
    out_sizes.push_back(dim);
    auto out = torch::empty(out_sizes, table_c.options());

    const int64_t tokens = ids_c.numel();
    if (tokens == 0) return out;
    embedding_rows_kernel<<<(unsigned)tokens, 256>>>(
        ids_c.data_ptr<int64_t>(),
        reinterpret_cast<const __nv_bfloat16*>(table_c.data_ptr<at::BFloat16>()),
        reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>()), vocab, dim);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        TORCH_CHECK(false, "embedding_rows_kernel failed: ", cudaGetErrorString(err));
    }
    return out;
}
"""

embedding_cpp = "torch::Tensor embedding_forward(torch::Tensor ids, torch::Tensor table);"

embedding_ext = load_inline(
    name="embedding_gather_rows",
    cpp_sources=embedding_cpp,
    cuda_sources=embedding_source,
    functions=["embedding_forward"],
    verbose=False,
)


class Model(nn.Module):
    """Embedding lookup with a custom row-copy kernel."""

    def __init__(self, vocab: int, dim: int, dtype: torch.dtype):
        super().__init__()
        self.table = nn.Embedding(vocab, dim, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return embedding_ext.embedding_forward(ids, self.table.weight)


batch_size = 2
seq_len = 2048
vocab = 32000
dim = 4096
dtype = torch.bfloat16


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len), dtype=torch.int64)]


def get_init_inputs():
    return [vocab, dim, dtype]
