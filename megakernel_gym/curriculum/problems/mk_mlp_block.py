"""The MLP half of a Llama decoder layer for one decode step, compiled as one megakernel."""
import torch

from megakernel_gym.compiler.zoo import DecodeStep, LlamaConfig, block_roofline

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "mlp_block_decode"
DTYPES = ["bfloat16"]
TAGS = ["megakernel", "decode", "memory-bound", "mlp", "bf16"]
SPLIT = "train"
DESCRIPTION = ("x + down(silu(gate(h)) * up(h)) with h = rmsnorm(x), for one bf16 decode token with "
               "Llama-3.2-1B shapes (hidden 2048, ffn 8192: 100 MB of weights)."
               " Activations stay fp32 (weights bf16): x [1, 2048] fp32 in and out.")

block = "mlp"
config = LlamaConfig.llama_1b().__dict__
CPU_SIZES = {"config": LlamaConfig.tiny().__dict__}   # hidden 64, ffn 128, fp32, 2 tokens

# The reference keeps activations in float32 (DecodeStep), so its own error against float64 is
# bf16 rounding of the new cache rows only (about a quarter of this tolerance, measured on the
# 1B shapes); a megakernel must keep activations and accumulation in fp32 too.
ATOL = 1e-2
RTOL = 1e-2


class Model(DecodeStep):
    """The zoo's MLPBlock, weights from the judge's seed."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config)


class Baseline(DecodeStep):
    """What the judge times as eager / CUDA graphs / torch.compile: the zoo model as it is (bf16)."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config, activations=None)


def get_inputs():
    return [torch.randn(config["batch"], config["hidden"])]   # the fp32 residual stream


def get_init_inputs():
    return [block, config]


def FLOPS():
    return block_roofline(block, LlamaConfig(**config), 0)[0]


def BYTES():
    return block_roofline(block, LlamaConfig(**config), 0)[1]
