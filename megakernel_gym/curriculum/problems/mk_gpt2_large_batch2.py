"""Two sequences decoded together through transformers' GPT2LMHeadModel at GPT-2 large's shapes: 36 layers."""
from megakernel_gym.compiler.families import (FamilyBaseline, FamilyConfig, FamilyStep, family_inputs,
                                              family_roofline)

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
