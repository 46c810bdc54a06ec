"""Four sequences decoding together through a Llama-3.2-1B-shaped model: weights read once serve four tokens."""
import torch

from megakernel_gym.compiler.zoo import DecodeStep, LlamaConfig, block_roofline

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "llama_decode_batched"
DTYPES = ["bfloat16"]
TAGS = ["megakernel", "decode", "memory-bound", "llama", "bf16", "batched"]
SPLIT = "train"
DESCRIPTION = ("One bf16 decode step of a 16-layer Llama-3.2-1B-shaped decoder (hidden 2048, GQA 32/8 heads, "
               "SwiGLU 8192, tied 128k vocabulary) for 4 sequences at independent positions: token ids and positions in, logits out, "
               "KV caches (1024 slots) prefilled."
               " Activations stay fp32 (weights, KV caches bf16); outputs: logits [4, vocab] fp32 and the k, v rows written to each layer's cache [16, 4, 8, 64] bf16.")

block = "llama"
config = LlamaConfig.llama_1b(batch=4).__dict__   # 4 caches of 1024 slots
# CPU: the zoo's llama-tiny (2 layers, hidden 64, fp32) with 3 sequences
CPU_SIZES = {"config": LlamaConfig.tiny(batch=3).__dict__}

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
