"""FP8 (e4m3) GEMM with per-token and per-channel fp32 scales, as in FP8-quantized LLM inference."""
import torch
import torch.nn as nn

LEVEL = 4
OP_TYPE = "fp8_gemm"
DTYPES = ["float8_e4m3fn", "float32", "bfloat16"]
DESCRIPTION = ("out[m, n] = a_scale[m] * b_scale[n] * sum_k a[m, k] * b[n, k], output bf16, for float8_e4m3fn "
               "activations a [M, K] and weights b [N, K] (both K-major) with fp32 per-row scales a_scale [M] and "
               "b_scale [N]; products of e4m3 values are exact in fp32, so accumulate in fp32.")
TAGS = ["matmul", "compute-bound", "fp8", "quantized"]
SPLIT = "train"

M = 4096     # tokens
N = 10240    # fused QKV projection of Llama-3 70B: 8192 + 2 * 1024 outputs
K = 8192     # hidden size
dtype = torch.float8_e4m3fn
out_dtype = torch.bfloat16

# The Triton interpreter loads float8 pointers (as bytes) and converts them, so the CPU run keeps
# fp8 inputs; only the output is fp32 there.
CPU_SIZES = {"M": 11, "N": 19, "K": 40, "out_dtype": torch.float32}

# x*a + b is not defined for float8 tensors, and rescaling a quantized tensor would leave its
# grid anyway; the scales already vary every row's magnitude.
INPUT_TRANSFORMS = ()

# The production kernel this problem is timed against (issue 43): torch._scaled_mm, cuBLASLt's FP8 GEMM with
# row-wise scales (a_scale per row of a, b_scale per row of b), what torchao's and vLLM's FP8 linear layers call
# on an H100.
PRODUCTION = {"scaled_mm": "torch._scaled_mm: cuBLASLt FP8 GEMM, row-wise scales"}

FP8_MAX = 448.0  # largest finite float8_e4m3fn


def quantize_rows(x: torch.Tensor):
    """Per-row absmax quantization: returns (x / scale as e4m3, scale) with the row max mapped to 448."""
    scale = x.abs().amax(dim=1).clamp_min(1e-12) / FP8_MAX
    return (x / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale.float()


class Model(nn.Module):
    """Dequantize to the scales' dtype (fp32; fp64 in a float64 run, where fp8 values convert exactly)."""

    def __init__(self, out_dtype: torch.dtype):
        super().__init__()
        self.out_dtype = out_dtype

    def forward(self, a, b, a_scale, b_scale):
        ct = a_scale.dtype
        acc = a.to(ct) @ b.to(ct).T
        return (acc * a_scale[:, None] * b_scale[None, :]).to(self.out_dtype)


def get_inputs():
    # activations ~N(0, 1) and weights ~N(0, 1/K) quantized like a real FP8 checkpoint: outputs ~N(0, 1)
    a, a_scale = quantize_rows(torch.randn(M, K))
    b, b_scale = quantize_rows(torch.randn(N, K) * K ** -0.5)
    return [a, b, a_scale, b_scale]


def get_init_inputs():
    return [out_dtype]


def production_baselines(model):
    def run(a, b, a_scale, b_scale):
        return torch._scaled_mm(a, b.T, scale_a=a_scale[:, None].float(), scale_b=b_scale[None, :].float(),
                                out_dtype=model.out_dtype)
    return {"scaled_mm": run}


def FLOPS():
    # the product, plus two scale multiplies per output element
    return 2 * M * N * K + 2 * M * N


def BYTES():
    # one byte per fp8 element, fp32 scales, bf16 output
    return M * K + N * K + 4 * (M + N) + M * N * out_dtype.itemsize
