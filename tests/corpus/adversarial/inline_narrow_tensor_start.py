# expect: runtime_error no_gpu
# expect-gpu: compile_error host_code
# problem: embedding_gather
# refused: where an integer goes
# red team 23: the host function gathers the rows itself, out.narrow(0, k, 1).copy_(table.narrow(0, ids.select(0, k), 1)):
# at::Tensor::narrow(dim, const Tensor& start, length) is a real overload (aten::narrow.Tensor), so g++ builds it, and the
# interpreter passed the 0-d tensor to torch, which read it on the host; the one kernel launched does nothing. On the cpu
# backend no host code runs (no_gpu); in the interpreter it is refused when the call reaches it
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void touch_kernel(const long* ids, int n) {}

torch::Tensor gather(torch::Tensor table, torch::Tensor ids) {
    auto flat = ids.reshape({-1});
    auto out = torch::empty({flat.size(0), table.size(1)}, table.options());
    for (int64_t k = 0; k < flat.size(0); k++) {
        out.narrow(0, k, 1).copy_(table.narrow(0, flat.select(0, k), 1));
    }
    touch_kernel<<<1, 1>>>(flat.data_ptr<int64_t>(), 1);
    return out.view({ids.size(0), ids.size(1), table.size(1)});
}
"""
cpp_src = "torch::Tensor gather(torch::Tensor table, torch::Tensor ids);"

ext = load_inline(name="gather_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["gather"])


class ModelNew(nn.Module):
    def __init__(self, vocab, dim, dtype):
        super().__init__()
        self.table = nn.Embedding(vocab, dim, dtype=dtype)

    def forward(self, ids):
        return ext.gather(self.table.weight, ids)
