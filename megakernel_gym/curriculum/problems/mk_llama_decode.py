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
               "KV caches (1024 slots) prefilled."
               " Activations stay fp32 (weights, KV caches bf16); outputs: logits [1, vocab] fp32 and the k, v rows written to each layer's cache [16, 1, 8, 64] bf16.")

block = "llama"
config = LlamaConfig.llama_1b().__dict__          # the zoo's llama-1b: 2.47 GB of bf16 weights
# CPU: the zoo's llama-tiny (2 layers, hidden 64, fp32), batch 2 so positions differ per sequence
CPU_SIZES = {"config": LlamaConfig.tiny().__dict__}

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
            torch.randint(0, config["max_seq"], (config["batch"],))]    # positions


def get_init_inputs():
    return [block, config]


def FLOPS():
    return block_roofline(block, LlamaConfig(**config), config["max_seq"] // 2)[0]


def BYTES():
    return block_roofline(block, LlamaConfig(**config), config["max_seq"] // 2)[1]
