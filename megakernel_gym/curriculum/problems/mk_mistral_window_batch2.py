"""Two sequences deep in long contexts through transformers' MistralForCausalLM: the window, not the context, bounds the cache reads."""
from megakernel_gym.compiler.families import (FamilyBaseline, FamilyConfig, FamilyStep, family_inputs,
                                              family_roofline)

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "mistral_decode"
FAMILY = "mistral"   # the transformers family (compiler.families): held out or trained on as a whole
DTYPES = ["bfloat16"]
TAGS = ['megakernel', 'decode', 'memory-bound', 'transformers', 'mistral', 'sliding-window', 'batched', 'long-context', 'bf16']
SPLIT = "heldout"
DESCRIPTION = ("One bf16 decode step of transformers' MistralForCausalLM at 1B-class shapes (16 layers, hidden 2048, GQA 32/8 heads of 64, sliding window 1024, SwiGLU 7168, untied 32k vocabulary), random weights, 2 sequences at their own positions, KV caches of 4096 slots prefilled: token ids and positions in, logits out."
               " Activations stay fp32 (weights, KV caches bf16); outputs: logits [2, vocab] fp32 and the k, v rows "
               "written to each layer's cache [16, 2, 8, 64] bf16.")

block = "mistral"
# a 1B-class Mistral, batch 2
config = FamilyConfig(family=block, vocab=32768, hidden=2048, layers=16, q_heads=32, kv_heads=8, head_dim=64,
                      ffn=7168, max_seq=4096, rope_theta=1000000.0, eps=1e-05, dtype='bfloat16', batch=2,
                      tie_embeddings=False, extra={'sliding_window': 1024}).__dict__
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
