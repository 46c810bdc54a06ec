"""A decode step deep into a long context: the KV cache reads rival the weights."""
import torch

from megakernel_gym.compiler.zoo import DecodeStep, LlamaConfig, block_roofline

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "llama_decode_long_context"
DTYPES = ["bfloat16"]
TAGS = ["megakernel", "decode", "memory-bound", "llama", "bf16", "attention", "long-context"]
SPLIT = "heldout"
DESCRIPTION = ("One bf16 decode step of a 16-layer Llama-3.2-1B-shaped decoder (hidden 2048, GQA 32/8 heads, "
               "SwiGLU 8192, tied 128k vocabulary) for 2 sequences 12k-16k tokens into their context: token ids and positions in, logits out, "
               "KV caches (16384 slots, 537 MB per sequence) prefilled."
               " Activations stay fp32 (weights, KV caches bf16); outputs: logits [2, vocab] fp32 and the k, v rows written to each layer's cache [16, 2, 8, 64] bf16.")

block = "llama"
config = LlamaConfig.llama_1b(batch=2, max_seq=16384).__dict__
# CPU: the zoo's llama-tiny (fp32) with a 75-slot cache
CPU_SIZES = {"config": LlamaConfig.tiny(max_seq=75).__dict__}

# The reference keeps activations in float32 (DecodeStep), so its own error against float64 is
# bf16 rounding of the new cache rows only (about a quarter of this tolerance, measured on the
# 1B shapes); a megakernel must keep activations and accumulation in fp32 too.
ATOL = 1e-2
RTOL = 1e-2


class Model(DecodeStep):
    """The zoo's LlamaDecoder, weights and prefilled caches from the judge's seed."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config)


class Baseline(DecodeStep):
    """What the judge times as eager / CUDA graphs / torch.compile: the zoo model as it is (bf16)."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config, activations=None)


def get_inputs():
    return [torch.randint(0, config["vocab"], (config["batch"],)),      # token ids
            torch.randint(3 * config["max_seq"] // 4, config["max_seq"], (config["batch"],))]  # late positions


def get_init_inputs():
    return [block, config]


def FLOPS():
    return block_roofline(block, LlamaConfig(**config), 7 * config["max_seq"] // 8)[0]


def BYTES():
    return block_roofline(block, LlamaConfig(**config), 7 * config["max_seq"] // 8)[1]
