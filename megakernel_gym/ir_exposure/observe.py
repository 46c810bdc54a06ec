"""What the agent reads and how its text is read: action parsing, feedback, the LLM prompt.

An action is text. `read_action` tells a `submit`, kernel code (bare source defining ModelNew, or
an answer whose fenced ```python block does: the judge's own reading, `candidate_code`) and
edit-language commands apart; `feedback` turns an
EvalResult into a message a model can act on (which seed failed and by how much, the timings
against each baseline, which anti-cheat rule fired, the compiler's message); `prompt` joins an
observation into one string for an LLM.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass

from megakernel_gym.rewards.problem import candidate_code, lone_surrogate

CHARSET = frozenset(string.printable)   # what observations and actions are made of (Gymnasium Text)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)


@dataclass(frozen=True)
class Action:
    kind: str           # "submit" | "code" | "edits" | "invalid"
    text: str           # the code or edit text itself (fences stripped)
    why: str = ""       # for "invalid": what is wrong and the fix


def printable(text: str, limit: int) -> str:
    """Text fit for a Gymnasium Text space: other characters become '?', long text is cut with a note."""
    out = "".join(c if c in CHARSET else "?" for c in text)
    if len(out) > limit:
        note = f"\n... [cut: {len(out) - limit + 40} more characters]"
        out = out[: max(0, limit - len(note))] + note
    return out


def read_action(text: object, kind: str, max_chars: int) -> Action:
    """`kind` is the episode's: "code" (write a ModelNew) or "edits" (edit the megakernel IR)."""
    if not isinstance(text, str):
        return Action("invalid", "", f"an action is text, got {type(text).__name__}")
    if len(text) > max_chars:
        return Action("invalid", "", f"the action is {len(text):,} characters; the limit is {max_chars:,}. "
                      "Send one kernel or a few edit lines at a time")
    if "\x00" in text:
        return Action("invalid", "", "the action contains NUL bytes; send plain text")
    bad = lone_surrogate(text)
    if bad is not None:
        return Action("invalid", "", f"the action holds a lone surrogate (U+{ord(text[bad]):04X}) at character "
                      f"{bad:,}, which no UTF-8 text can hold; send plain text")
    body = text.strip()
    if not body:
        return Action("invalid", "", "the action is empty; send " + ("a ```python block defining ModelNew"
                      if kind == "code" else "edit commands (e.g. `tile lm_head n=64`)") + ", or `submit`")
    if body.lower() in ("submit", "`submit`", "done"):
        return Action("submit", "")
    blocks = _FENCE.findall(text)
    if kind == "code":
        code = candidate_code(text)
        if code == text and not re.search(r"^class (?:ModelNew|Model)\b", text, re.M):
            # no kernel class anywhere: a python block still goes to the judge, which says what it lacks
            code = next((b for lang, b in blocks if lang.lower() in ("python", "py", "")), None)
        if code is None:
            return Action("invalid", "", "no kernel code found: send one ```python block that defines "
                          "class ModelNew(nn.Module) with Model's constructor arguments, or `submit`")
        return Action("code", code)
    # edits: inside a fence or bare lines; kernel code is the wrong kind of action here
    edits = next((b for lang, b in blocks if lang.lower() in ("", "text", "edits", "mkgym")), None)
    src = edits if edits is not None else text
    if re.search(r"^\s*class ModelNew\b", src, re.M):
        return Action("invalid", "", "this is a megakernel problem: the action is IR edit commands "
                      "(tile, assign, order, counter, prefetch, fuse, unfuse, impl), not a ModelNew")
    return Action("edits", src.strip())


def _num(x) -> str:
    """A figure as a reader wants it: 1,234.5 / 12.3 / 0.0123, never 0.0 for something small."""
    if x is None:
        return "n/a"
    x = float(x)
    return f"{x:,.1f}" if abs(x) >= 10 else f"{x:.3g}"


def feedback(result, turn: int, turns: int, best: float, reward: float) -> str:
    """One EvalResult as the message the agent reads next turn."""
    r = result
    lines = [f"turn {turn}/{turns}: {r.status}" + (f" [{r.category}]" if r.category else "")
             + f" -- {r.reason}"]
    for f in (r.flags or [])[:5]:
        lines.append(f"anti-cheat rule fired: {f}")
    if r.compile_log:
        lines.append("compiler says:\n" + r.compile_log.strip()[-3000:])
    bad = [s for s in (r.seeds or []) if not s.get("ok")]
    if bad:
        s = bad[0]
        errs = [f"{name} {_num(s.get(key))}" for name, key in (("max abs err", "max_abs_err"),
                                                               ("max rel err", "max_rel_err")) if s.get(key) is not None]
        lines.append(f"failed on {s.get('label')}: " + (", ".join(errs) if errs else "see the reason above"))
    if r.timing:
        t = r.timing
        if "median_ms" in t:
            lines.append(f"your kernel: {t['median_ms']:.4f} ms median ({t.get('samples')} calls)")
        if "predicted_us" in t:
            share = (f", {100 * t['floor_us'] / t['predicted_us']:.0f}% of it" if t.get("floor_us")
                     and t["predicted_us"] else "")
            lines.append(f"predicted: {_num(t['predicted_us'])} us (bandwidth/compute floor "
                         f"{_num(t.get('floor_us'))} us{share})")
    for name, b in (r.baselines or {}).items():
        if isinstance(b, dict) and b.get("median_ms") is not None:
            sp = (r.speedups or {}).get(name)
            lines.append(f"  {name}: {b['median_ms']:.4f} ms" + (f" -> speedup {sp:.3f}x" if sp else ""))
        elif isinstance(b, dict) and b.get("predicted_us") is not None:
            lines.append(f"  {name}: {b['predicted_us']:.1f} us predicted")
    if r.speedup is not None:
        lines.append(f"speedup vs the best baseline: {r.speedup:.3f}x")
    lines.append(f"reward {reward:+.3f}; best score this episode {best:+.3f}")
    if r.log_tail and r.status in ("runtime_error", "incorrect"):
        lines.append("log tail:\n" + r.log_tail.strip()[-1500:])
    return "\n".join(lines)


def prompt(obs: dict, kind: str) -> str:
    """An observation as one prompt string for an LLM policy."""
    how = ("Reply with one ```python block defining class ModelNew (same constructor as Model) whose forward "
           "runs your own Triton or CUDA C kernels, or with `submit` to end the episode."
           if kind == "code" else
           "Reply with edit commands, one per line (tile OP n=N | assign OP sms=A-B | order OP before|after OP | "
           "counter OP tile|op | prefetch OP depth=N | fuse OP into OP | unfuse OP | impl OP <<<code>>>), "
           "or `submit` to end the episode.")
    parts = [obs["problem"].rstrip(), "", "## Current " + ("kernel" if kind == "code" else "megakernel IR"),
             obs["code"].rstrip() or "(none yet)", "", "## Feedback", obs["feedback"].rstrip() or "(none yet)",
             "", "## Your move", how]
    return "\n".join(parts)
