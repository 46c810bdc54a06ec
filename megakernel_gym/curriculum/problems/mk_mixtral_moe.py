"""One decode step of transformers' MixtralForCausalLM (0.5B-class): each token routed to 2 of 8 SwiGLU experts."""
from megakernel_gym.compiler.families import (FamilyBaseline, FamilyConfig, FamilyStep, family_inputs,
                                              family_roofline)

LEVEL = 5
KIND = "megakernel"   # the agent edits the compiler's IR (schedule, fusion, tiles), not a ModelNew
OP_TYPE = "mixtral_decode"
FAMILY = "mixtral"   # the transformers family (compiler.families): held out or trained on as a whole
DTYPES = ["bfloat16"]
TAGS = ['megakernel', 'decode', 'memory-bound', 'transformers', 'mixtral', 'moe', 'bf16']
SPLIT = "train"
DESCRIPTION = ("One bf16 decode step of transformers' MixtralForCausalLM at 0.5B-class shapes (8 layers, hidden 1024, "
               "GQA 16/8 heads of 64, 8 SwiGLU experts of 2048 with top-2 routing, untied 32k vocabulary), random weights, "
               "2 sequences at their own positions, KV caches of 1024 slots prefilled: token ids and positions in, logits out."
               " The compiler runs every expert on every row, weighted by its router weight (0 unless chosen)."
               " Activations stay fp32 (weights, KV caches bf16); outputs: logits [2, vocab] fp32 and the k, v rows "
               "written to each layer's cache [8, 2, 8, 64] bf16.")

block = "mixtral"
# Mixtral-8x7B's layout (8 experts, top-2) at 0.5B-class size; 8 layers keep the dense default under
# the IR's task limit (each expert is 4 ops of ~128 tiles)
config = FamilyConfig(family=block, vocab=32000, hidden=1024, layers=8, q_heads=16, kv_heads=8,
                      head_dim=64, ffn=2048, max_seq=1024, rope_theta=1000000.0, eps=1e-05,
                      dtype='bfloat16', batch=2, tie_embeddings=False,
                      extra={'num_local_experts': 8, 'num_experts_per_tok': 2}).__dict__
# CPU: 2 layers, hidden 64, 4 experts (top-2), fp32, batch 2 (the family's tiny config)
CPU_SIZES = {"config": FamilyConfig.tiny(block).__dict__}

# The reference keeps activations in float32 (DecodeStep); a megakernel must keep activations and
# accumulation in fp32 too. The GPU judge's own check is relative to eager bf16's error.
# the experts' weights must matter together, not each alone: an expert no token chose may be skipped
ROUTED_WEIGHTS = r"\.mlp\.expert_(gate|up|down)\.\d+\.weight$"
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
