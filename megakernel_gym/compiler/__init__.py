"""The megakernel compiler: model -> graph IR -> tile task graph -> schedule -> megakernel.

First stage: `capture` turns an nn.Module into a `Graph` of PRIMITIVES; `run_graph` is the
Graph's reference semantics; `ZOO` holds the models the pipeline is built and tested on.
"""
from megakernel_gym.compiler.capture import capture, module_tensors
from megakernel_gym.compiler.graph import (PRIMITIVES, TENSOR_KINDS, Graph, Op, TensorSpec,
                                           UnsupportedOpError)
from megakernel_gym.compiler.interpret import reference_op, run_graph
from megakernel_gym.compiler.zoo import ZOO, AttentionBlock, LlamaConfig, LlamaDecoder, MLPBlock

__all__ = ["capture", "run_graph", "reference_op", "module_tensors", "ZOO", "LlamaConfig",
           "LlamaDecoder", "MLPBlock", "AttentionBlock", "Graph", "Op", "TensorSpec",
           "PRIMITIVES", "TENSOR_KINDS", "UnsupportedOpError"]
