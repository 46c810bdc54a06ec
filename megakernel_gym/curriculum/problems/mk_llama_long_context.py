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
               "KV caches (16384 slots, 537 MB per sequence) prefilled.")

block = "llama"
config = LlamaConfig.llama_1b(batch=2, max_seq=16384).__dict__
# CPU: the zoo's llama-tiny (fp32) with a 75-slot cache
CPU_SIZES = {"config": LlamaConfig.tiny(max_seq=75).__dict__}

# 16 layers of bf16 rounding (every matmul output, the residual stream) against the reference:
# two correct bf16 implementations differ by a few percent on unit-scale logits, which the
# bf16 default of 1e-2 would call wrong. `mkgym problems check` calibrates this on a GPU.
ATOL = 5e-2
RTOL = 5e-2


class Model(DecodeStep):
    """The zoo's LlamaDecoder, weights and prefilled caches from the judge's seed."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config)


def get_inputs():
    return [torch.randint(0, config["vocab"], (config["batch"],)),      # token ids
            torch.randint(3 * config["max_seq"] // 4, config["max_seq"], (config["batch"],))]  # late positions


def get_init_inputs():
    return [block, config]


def FLOPS():
    return block_roofline(block, LlamaConfig(**config), 7 * config["max_seq"] // 8)[0]


def BYTES():
    return block_roofline(block, LlamaConfig(**config), 7 * config["max_seq"] // 8)[1]
