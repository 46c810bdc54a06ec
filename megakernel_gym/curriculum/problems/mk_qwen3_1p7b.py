"""One decode step of transformers' Qwen3ForCausalLM at Qwen3-1.7B's shapes."""
from megakernel_gym.compiler.families import (FamilyBaseline, FamilyConfig, FamilyStep, family_inputs,
                                              family_roofline)

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "qwen3_decode"
FAMILY = "qwen3"   # the transformers family (compiler.families): held out or trained on as a whole
DTYPES = ["bfloat16"]
TAGS = ['megakernel', 'decode', 'memory-bound', 'transformers', 'qwen3', 'qk-norm', 'bf16']
SPLIT = "heldout"
DESCRIPTION = ("One bf16 decode step of transformers' Qwen3ForCausalLM at Qwen3-1.7B shapes (28 layers, hidden 2048, GQA 16/8 heads of 128 with per-head q/k RMSNorm, SwiGLU 6144, tied 152k vocabulary), random weights, one sequence, KV caches of 2048 slots prefilled: token ids and positions in, logits out."
               " Activations stay fp32 (weights, KV caches bf16); outputs: logits [1, vocab] fp32 and the k, v rows "
               "written to each layer's cache [28, 1, 8, 128] bf16.")

block = "qwen3"
# Qwen3-1.7B's shapes
config = FamilyConfig(family=block, vocab=151936, hidden=2048, layers=28, q_heads=16, kv_heads=8,
                      head_dim=128, ffn=6144, max_seq=2048, rope_theta=1000000.0, eps=1e-06,
                      dtype='bfloat16', batch=1, tie_embeddings=True).__dict__
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
