"""Weight-only int4 GEMM (W4A16, group-wise scales) as in GPTQ/AWQ-quantized LLM decoding."""
import torch
import torch.nn as nn

LEVEL = 4
OP_TYPE = "int4_gemm"
DTYPES = ["bfloat16", "uint8"]
DESCRIPTION = ("out = x @ W^T for bf16 x [batch_size, in_features], with W [out_features, in_features] stored as uint8 "
               "qweight [out_features, in_features/2] (element 2j in the low nibble, 2j+1 in the high nibble) and bf16 "
               "scales [out_features, in_features/group_size]: W[n, k] = (nibble - 8) * scales[n, k // group_size].")
TAGS = ["matmul", "memory-bound", "quantized", "int4", "bf16", "decode"]
SPLIT = "train"

batch_size = 16       # sequences decoding together: the weight read dominates
in_features = 8192    # Llama-3 70B hidden size
out_features = 28672  # its MLP width: 112 MiB of packed int4 weights
group_size = 128
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 5, "in_features": 40, "out_features": 27, "group_size": 8, "dtype": torch.float32}

# Kernels that dequantize to bf16 before the tensor-core product (Marlin/AWQ style) round each
# (nibble - 8) * scale to bf16, up to ~0.007 from this fp32 reference on an H200 with outputs
# ~0.8 in size; 1.5e-2 leaves room for it.
ATOL = 1.5e-2

# x*16 makes outputs ~13 in size, and that same weight rounding then misses the tolerance on
# outputs near zero; x+6 adds 6 * W's row sums, a large and well-conditioned offset.
INPUT_TRANSFORMS = ("shift",)

# The production kernel this problem is timed against (issue 43): tinygemm, PyTorch's int4 weight-only GEMM
# (torch._weight_int4pack_mm, what gpt-fast's and torchao's int4 weight-only layers call), on these weights
# repacked once into its tile layout, with the problem's scales and zero offsets of 0 (its dequantization is
# (q - 8) * scale + zero, the problem's with zero = 0).
PRODUCTION = {"tinygemm_int4": "torch._weight_int4pack_mm (tinygemm), int4 weight-only, group-wise bf16 scales"}


class Model(nn.Module):
    """Unpack, dequantize in fp32 (fp64 in a float64 run) and multiply; output in x's dtype."""

    def __init__(self, in_features: int, out_features: int, group_size: int, dtype: torch.dtype):
        super().__init__()
        self.group_size = group_size
        # quantized checkpoints hold these as buffers; every nibble value 0..15 is equally likely
        self.register_buffer("qweight", torch.randint(0, 256, (out_features, in_features // 2), dtype=torch.uint8))
        # (nibble - 8) has std ~4.6: scales near 1/(4.6 sqrt(in_features)) give outputs ~N(0, 1), and
        # a 0.5-1.5 spread per group makes a kernel that applies the wrong group's scale fail
        base = 1.0 / (4.6 * in_features ** 0.5)
        scales = (torch.rand(out_features, in_features // group_size) + 0.5) * base
        self.register_buffer("scales", scales.to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ct = torch.promote_types(self.scales.dtype, torch.float32)
        n = self.qweight.shape[0]
        low, high = self.qweight & 0xF, self.qweight >> 4
        nibbles = torch.stack([low, high], dim=-1).reshape(n, -1)  # [out_features, in_features]
        w = (nibbles.to(ct) - 8) * self.scales.to(ct).repeat_interleave(self.group_size, dim=1)
        return (x.to(ct) @ w.T).to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=dtype)]


def get_init_inputs():
    return [in_features, out_features, group_size, dtype]


def production_baselines(model):
    q = model.qweight                       # [out_features, in_features / 2]: the even k in the low nibble
    n, k = q.shape[0], q.shape[1] * 2
    sz = torch.stack([model.scales.t(), torch.zeros_like(model.scales.t())], dim=-1).to(torch.bfloat16).contiguous()
    if q.is_cuda:
        packed = torch._convert_weight_to_int4pack((q << 4) | (q >> 4), 8)   # tinygemm wants the even k high

        def run(x):
            return torch._weight_int4pack_mm(x.to(torch.bfloat16), packed, model.group_size, sz).to(x.dtype)
    else:                                   # its CPU kernel (the cpu backend's check)
        packed = torch._convert_weight_to_int4pack_for_cpu(torch.stack([q & 0xF, q >> 4], -1).reshape(n, k).int(), 1)

        def run(x):
            return torch._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), packed, model.group_size, sz).to(x.dtype)
    return {"tinygemm_int4": run}


def FLOPS():
    # the product, plus an unpack-subtract and a scale multiply per weight
    return 2 * batch_size * in_features * out_features + 2 * in_features * out_features


def BYTES():
    # half a byte per weight, a bf16 scale per group, x in and out back
    packed = out_features * in_features // 2
    scales = out_features * (in_features // group_size) * dtype.itemsize
    return packed + scales + (batch_size * in_features + batch_size * out_features) * dtype.itemsize
