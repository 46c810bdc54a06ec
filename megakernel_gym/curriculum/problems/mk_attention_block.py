"""The attention half of a Llama decoder layer for one decode step, compiled as one megakernel."""
import torch

from megakernel_gym.compiler.zoo import DecodeStep, LlamaConfig, block_roofline

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "attention_block_decode"
DTYPES = ["bfloat16"]
TAGS = ["megakernel", "decode", "attention", "bf16"]
SPLIT = "heldout"
DESCRIPTION = ("x + o_proj(attention(rope(q), cache <- rope(k), cache <- v)) with q, k, v projected from "
               "rmsnorm(x): one bf16 decode step of Llama-3.2-1B's attention (32 query / 8 kv heads of 64) "
               "for 4 sequences over prefilled 1024-slot KV caches."
               " Activations stay fp32 (weights, KV caches bf16): x [4, 2048] fp32 in; out [4, 2048] fp32 and the new k, v cache rows [4, 8, 64] bf16 out.")

block = "attention"
config = LlamaConfig.llama_1b(batch=4).__dict__
CPU_SIZES = {"config": LlamaConfig.tiny(batch=3).__dict__}   # hidden 64, 4/2 heads, fp32

# The reference keeps activations in float32 (DecodeStep), so its own error against float64 is
# bf16 rounding of the new cache rows only (about a quarter of this tolerance, measured on the
# 1B shapes); a megakernel must keep activations and accumulation in fp32 too.
ATOL = 1e-2
RTOL = 1e-2


class Model(DecodeStep):
    """The zoo's AttentionBlock, weights and prefilled caches from the judge's seed."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config)


class Baseline(DecodeStep):
    """What the judge times as eager / CUDA graphs / torch.compile: the zoo model as it is (bf16)."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config, activations=None)


def get_inputs():
    return [torch.randn(config["batch"], config["hidden"]),   # the fp32 residual stream
            torch.randint(0, config["max_seq"], (config["batch"],))]


def get_init_inputs():
    return [block, config]


def FLOPS():
    return block_roofline(block, LlamaConfig(**config), config["max_seq"] // 2)[0]


def BYTES():
    return block_roofline(block, LlamaConfig(**config), config["max_seq"] // 2)[1]
