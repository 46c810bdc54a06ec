"""A tiny causal LM made on the spot (no download): a byte-level BPE tokenizer trained on the
environment's own prompts and a two-layer GPT-2 from a config. For smoke tests of the training
path (CI trains it for a few GRPO steps on 2 CPU cores) and as a from-scratch policy to train on
the sim backend.

    path = make_tiny_model("runs/tiny", texts=[row["prompt"] for row in dataset])
"""
from __future__ import annotations

from pathlib import Path


CHAT_SPECIALS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
                 "</tool_response>", "<think>", "</think>"]


def make_tiny_model(out: str | Path, texts: list[str], vocab_size: int = 512, n_layer: int = 2, n_embd: int = 64,
                    n_positions: int = 8192, seed: int = 0, chat: bool = False) -> str:
    """Save a tokenizer trained on `texts` and a randomly initialised GPT-2 beside it; return the folder.
    chat=True gives the tokenizer Qwen3's chat template (the copy TRL ships), whose tool-call format
    TRL knows how to parse: what multi-turn training with tools needs."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # no progress bar: off a terminal, tokenizers' (Rust) bar writes blank lines straight to stdout, which
    # `mkgym train grpo --tiny --json` keeps for its one JSON value
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   bos_token="<|endoftext|>")
    if chat:
        from trl.chat_template_utils import qwen3_chat_template
        fast.add_special_tokens({"additional_special_tokens": CHAT_SPECIALS, "eos_token": "<|im_end|>"})
        fast.chat_template = qwen3_chat_template
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(fast), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=2,
                     bos_token_id=fast.eos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.eos_token_id)
    from megakernel_gym.policies.quiet import library_noise_off
    with library_noise_off(wandb_quiet=False):     # no "Writing model shards" bar for a model of a few MB
        GPT2LMHeadModel(cfg).save_pretrained(out)
    return str(out)


__all__ = ["make_tiny_model"]
