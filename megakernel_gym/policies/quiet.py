"""What training prints that a user can neither act on nor needs: named library warnings, model
loading's progress bars and an offline W&B run's banner and summary, silenced for the length of our
own calls (a context manager), never process-wide. Every other warning and error still shows."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings

# (category, start of the message): raised inside transformers/TRL by their own defaults or internals
LIBRARY_WARNINGS = [
    # TRL's GRPOConfig defaults gradient_checkpointing and its trainer calls the model's methods of that
    # name, which transformers 5.2x renamed activation_checkpointing (a name 5.17 lacks)
    (FutureWarning, r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated"),
    # the quickstart's rollout_func is TRL's (experimental) way to sample row by row
    (UserWarning, r"You are using 'rollout_func', which is an experimental feature"),
]


# transformers' log lines (logger.warning_once) of the same kind: TRL's generate passes no attention mask,
# and a tiny model made here has its pad token equal to its bos/eos, which the message itself says is fine
LIBRARY_LOG_LINES = [r"We strongly recommend passing in an `attention_mask`"]


class _DropLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(re.search(p, msg) for p in LIBRARY_LOG_LINES)


@contextlib.contextmanager
def library_noise_off(wandb_quiet: bool = True):
    """Inside: LIBRARY_WARNINGS ignored, LIBRARY_LOG_LINES dropped, transformers' progress bars off, and
    an offline W&B run (WANDB_MODE=offline) silent unless the user set WANDB_SILENT or WANDB_QUIET.
    All restored on exit."""
    saved_env = {k: os.environ.get(k) for k in ("WANDB_SILENT",)}
    if (wandb_quiet and os.environ.get("WANDB_MODE") == "offline"
            and "WANDB_SILENT" not in os.environ and "WANDB_QUIET" not in os.environ):
        os.environ["WANDB_SILENT"] = "true"      # no banner, no 40-line history and summary at finish
    bars = None
    try:
        from transformers.utils import logging as hf_logging
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()       # "Loading weights", "Writing model shards" of a 1 MB model
    except ImportError:
        hf_logging = None
    drop = _DropLines()
    hf_logger = logging.getLogger("transformers")
    hf_logger.addFilter(drop)                   # records of transformers.* loggers propagate through its handler
    for h in hf_logger.handlers:
        h.addFilter(drop)
    with warnings.catch_warnings():
        for category, message in LIBRARY_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        try:
            yield
        finally:
            hf_logger.removeFilter(drop)
            for h in hf_logger.handlers:
                h.removeFilter(drop)
            if hf_logging is not None and bars:
                hf_logging.enable_progress_bar()
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def offline_run_note(wandb_dir) -> str | None:
    """One line naming an offline W&B run's folder and how to upload it, or None where there is none."""
    from pathlib import Path
    runs = sorted(Path(wandb_dir).glob("wandb/offline-run-*"), key=lambda p: p.stat().st_mtime)
    return f"W&B run saved offline in {runs[-1]} (wandb sync {runs[-1]} uploads it)" if runs else None


__all__ = ["library_noise_off", "offline_run_note", "LIBRARY_WARNINGS", "LIBRARY_LOG_LINES"]
