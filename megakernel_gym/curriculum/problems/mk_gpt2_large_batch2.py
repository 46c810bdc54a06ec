"""Two sequences decoded together through transformers' GPT2LMHeadModel at GPT-2 large's shapes: 36 layers."""
import torch

from megakernel_gym.compiler.families import FamilyConfig
from megakernel_gym.compiler.zoo import DecodeStep, block_roofline

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "gpt2_decode"
FAMILY = "gpt2"   # the transformers family (compiler.families): held out or trained on as a whole
DTYPES = ["bfloat16"]
TAGS = ['megakernel', 'decode', 'memory-bound', 'transformers', 'gpt2', 'layernorm', 'gelu', 'batched', 'bf16']
SPLIT = "train"
DESCRIPTION = ("One bf16 decode step of transformers' GPT2LMHeadModel at GPT-2 large shapes (36 layers, hidden 1280, 20 heads of 64, GELU MLP 5120, learned positions, tied 50k vocabulary), random weights, 2 sequences at their own positions, KV caches of 1024 slots prefilled: token ids and positions in, logits out."
               " Activations stay fp32 (weights, KV caches bf16); outputs: logits [2, vocab] fp32 and the k, v rows "
               "written to each layer's cache [36, 2, 20, 64] bf16.")

block = "gpt2"
# GPT-2 large's shapes (774M parameters), batch 2
config = FamilyConfig(family=block, vocab=50257, hidden=1280, layers=36, q_heads=20, kv_heads=20,
                      head_dim=64, ffn=5120, max_seq=1024, eps=1e-05, dtype='bfloat16', batch=2,
                      tie_embeddings=True).__dict__
# CPU: 2 layers, hidden 64, fp32, batch 2 (the family's tiny config)
CPU_SIZES = {"config": FamilyConfig.tiny(block).__dict__}

# The reference keeps activations in float32 (DecodeStep); a megakernel must keep activations and
# accumulation in fp32 too. The GPU judge's own check is relative to eager bf16's error.
ATOL = 1e-2
RTOL = 1e-2


class Model(DecodeStep):
    """transformers' model of this family, adapted to the mkgym primitives (compiler.families); weights
    and prefilled caches from the judge's seed."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config)


class Baseline(DecodeStep):
    """What the judge times as eager / CUDA graphs / torch.compile: the adapted model as it is (bf16)."""

    def __init__(self, block: str, config: dict):
        super().__init__(block, config, activations=None)


def get_inputs():
    return [torch.randint(0, config["vocab"], (config["batch"],)),      # token ids
            torch.randint(0, config["max_seq"], (config["batch"],))]    # positions


def get_init_inputs():
    return [block, config]


def FLOPS():
    return block_roofline(block, FamilyConfig(**config), config["max_seq"] // 2)[0]


def BYTES():
    return block_roofline(block, FamilyConfig(**config), config["max_seq"] // 2)[1]
