"""One decode step of transformers' GPT2LMHeadModel at GPT-2 medium's shapes: LayerNorm, GELU, learned positions."""
from megakernel_gym.compiler.families import (FamilyBaseline, FamilyConfig, FamilyStep, family_inputs,
                                              family_roofline)

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "gpt2_decode"
FAMILY = "gpt2"   # the transformers family (compiler.families): held out or trained on as a whole
DTYPES = ["bfloat16"]
TAGS = ['megakernel', 'decode', 'memory-bound', 'transformers', 'gpt2', 'layernorm', 'gelu', 'bf16']
SPLIT = "train"
DESCRIPTION = ("One bf16 decode step of transformers' GPT2LMHeadModel at GPT-2 medium shapes (24 layers, hidden 1024, 16 heads of 64, GELU MLP 4096, learned positions, tied 50k vocabulary), random weights, one sequence, KV caches of 1024 slots prefilled: token ids and positions in, logits out."
               " Activations stay fp32 (weights, KV caches bf16); outputs: logits [1, vocab] fp32 and the k, v rows "
               "written to each layer's cache [24, 1, 16, 64] bf16.")

block = "gpt2"
# GPT-2 medium's shapes (355M parameters)
config = FamilyConfig(family=block, vocab=50257, hidden=1024, layers=24, q_heads=16, kv_heads=16,
                      head_dim=64, ffn=4096, max_seq=1024, eps=1e-05, dtype='bfloat16', batch=1,
                      tie_embeddings=True).__dict__
# CPU: 2 layers, hidden 64, fp32, batch 2 (the family's tiny config)
CPU_SIZES = {"config": FamilyConfig.tiny(block).__dict__}

# The reference keeps activations in float32 (DecodeStep); a megakernel must keep activations and
# accumulation in fp32 too. The GPU judge's own check is relative to eager bf16's error.
ATOL = 1e-2
RTOL = 1e-2


Model = FamilyStep          # transformers' model through its adapter, in float32 activations
Baseline = FamilyBaseline   # the adapted model as it is (bf16): what the judge times as eager and CUDA graphs


def get_inputs():
    return family_inputs(config)        # token ids and positions [batch]


def get_init_inputs():
    return [block, config]


def FLOPS():
    return family_roofline(block, config)[0]


def BYTES():
    return family_roofline(block, config)[1]
