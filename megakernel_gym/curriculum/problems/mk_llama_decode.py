"""One decode step of a whole Llama-3.2-1B-shaped model: the megakernel's home ground."""
import torch

from megakernel_gym.compiler.zoo import DecodeStep, LlamaConfig, block_roofline

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "llama_decode"
DTYPES = ["bfloat16"]
TAGS = ["megakernel", "decode", "memory-bound", "llama", "bf16"]
SPLIT = "train"
DESCRIPTION = ("One bf16 decode step of a 16-layer Llama-3.2-1B-shaped decoder (hidden 2048, GQA 32/8 heads, "
               "SwiGLU 8192, tied 128k vocabulary) for one sequence: token id and position in, logits out, "
               "KV caches (1024 slots) prefilled.")

block = "llama"
config = LlamaConfig.llama_1b().__dict__          # the zoo's llama-1b: 2.47 GB of bf16 weights
# CPU: the zoo's llama-tiny (2 layers, hidden 64, fp32), batch 2 so positions differ per sequence
CPU_SIZES = {"config": LlamaConfig.tiny().__dict__}

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
            torch.randint(0, config["max_seq"], (config["batch"],))]    # positions


def get_init_inputs():
    return [block, config]


def FLOPS():
    return block_roofline(block, LlamaConfig(**config), config["max_seq"] // 2)[0]


def BYTES():
    return block_roofline(block, LlamaConfig(**config), config["max_seq"] // 2)[1]
