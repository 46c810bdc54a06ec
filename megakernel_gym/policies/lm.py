"""A small transformer policy for level 5, trained with TRL: SFT on the expert's and the search's
schedules, then GRPO on the sim's rewards (bench/learning_lm.py runs both and records the curve).

    rows = ir_rows(obs_text)                 # the op lines of the IR text the env shows
    prompt = rows_prompt(rows)               # what the policy reads: op kinds, shapes, who reads what
    text = decisions_to_edits(rows, completion)   # what it writes, spelled in the env's edit language

The policy sees only the observation text. It reads one row per op line of the IR text (a
`repeat` block's lines once, for all its layers) and writes one decision per row: the words
`fuse` (into the op that reads it), `inline`, `op` (one counter for the op), `t<N>` (tile size N),
`s<N>` (split attention into N parts), or `-` (leave it), rows separated by `;`. The prompt names no
op: a row is its kind, the kinds of the ops that read it, its output shape and its grid, so what the
policy learns on one model family's names carries to another's (the held-out families' ops are
named differently: Qwen3's ropes are `rope` and `rope_1`, Llama's `q_rope` and `k_rope`).
`decisions_to_edits` spells the decisions as edit lines with the rows' own names, `{A..B}` for a
repeat block's layers; LMPolicy (policies/baselines.py, "lm") plays them and, when the env
refuses an edit, drops that line and sends the rest again: what the env's feedback tells any agent.

The model is a GPT-2 from a config (transformers), 4 layers of width 128, with a word-level
tokenizer over the prompt's closed vocabulary (tokenizers' WordLevel): numbers are exact up to
64 and log2 buckets above, so shapes the training never saw still read as their size. It reads
the rows one at a time and draws each row's decision right after the row's words (`decide`), so
its decisions stay aligned with the rows however many there are, from the words the row's
signature was given in its demonstrations (`action_words`, saved beside the model as
actions.json). Its demonstrations come with made-up rows of unseen kinds, decided `-`
(`augment`), so that it reads a row's content, not its place.
"""
from __future__ import annotations

import functools
import inspect
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

SHIPPED_MODEL = Path(__file__).with_name("lm_policy")    # written by `python bench/learning_lm.py`
ACTIONS_FILE = "actions.json"     # beside the model: the words each row may take (action_words)
KINDS = ("matmul", "elementwise", "rmsnorm", "layernorm", "rope", "cache_write", "decode_attention", "embedding",
         "moe_route")
VERB_ORDER = ("fuse", "op", "inline", "s", "t")      # the order edits are written in (the expert's)
MAX_PARTS = 64


class PolicyTextError(ValueError):
    """An observation without IR text, or IR text this policy cannot read."""


@dataclass
class Row:
    """One op line of the IR text."""
    name: str                   # as written: `model.layers.{i}.mlp.up_proj` in a repeat block
    kind: str
    ins: list[str]              # op names it reads (weights and inputs left out)
    out: list[int]              # output shape
    tiles: int
    size: int
    layers: tuple[int, int] | None = None     # the repeat block's first and last layer
    readers: list[str] = field(default_factory=list)
    alias_of: str | None = None  # a layer written out whose repeat-block row this is: it takes that row's decisions


_OP = re.compile(r"^op (\S+) (\S+) in=(\S*) out=([^\[\s]*)\[([\d,]*)\]\S* grid=(\d+)x(\d+)")
_REPEAT = re.compile(r"^repeat i=(\d+)\.\.(\d+)$")


def ir_section(text: str) -> str:
    """The IR text out of an observation (the prompt, or its `## Current megakernel IR` part)."""
    if "## Current megakernel IR" in text:
        text = text.split("## Current megakernel IR", 1)[1].split("\n## ", 1)[0]
    if "mkir v1" not in text:
        raise PolicyTextError("no megakernel IR text in the observation (expected a `mkir v1` header)")
    return text[text.index("mkir v1"):]


def ir_rows(text: str) -> list[Row]:
    """The op rows of the IR text in an observation, with who reads each."""
    rows: list[Row] = []
    aliases: dict[str, str] = {}
    layers = None
    for line in ir_section(text).splitlines():
        s = line.strip()
        m = _REPEAT.match(s)
        if m:
            layers = (int(m.group(1)), int(m.group(2)))
            continue
        if s == "end":
            layers = None
            continue
        m = _OP.match(s)
        if not m:
            continue
        name, kind, ins, alias, out, tiles, size = m.groups()
        rows.append(Row(name, kind, [x for x in ins.split(",") if x], [int(d) for d in out.split(",") if d],
                        int(tiles), int(size), layers))
        if alias:          # the op writes a tensor of another name (a KV cache): readers name that
            aliases[name] = alias
    if not rows:
        raise PolicyTextError("the IR text has no op lines")
    names = {r.name: r.name for r in rows}
    names.update({_resolve(op, alias, None) or alias: op for op, alias in aliases.items()})
    for r in rows:
        r.ins = [n for n in (_resolve(r.name, x, names) for x in r.ins) if n and n != r.name]
    by = {r.name: r for r in rows}
    for r in rows:
        for n in r.ins:
            by[n].readers.append(r.name)
    from megakernel_gym.ir_exposure.edits import layer_template
    templates = {r.name for r in rows if r.layers}
    for r in rows:
        t = layer_template(r.name)
        if r.layers is None and t != r.name and t in templates:
            r.alias_of = t
    return rows


def policy_rows(rows: list[Row]) -> list[Row]:
    """The rows the policy reads and decides for: all but a written-out layer's, which take the repeat
    block's decisions (the IR text prints a layer before its block when its inputs differ, such
    as the first layer's, which reads the embedding)."""
    return [r for r in rows if r.alias_of is None]


def _resolve(op: str, x: str, names: dict[str, str] | None) -> str | None:
    """An in= item as the op that writes it (`names`: tensor -> op): `.x` is relative to the op's scope
    (the longest scope that names one). names=None: the item in the op's own scope."""
    x = x.replace("{i-1}", "{i}")
    if not x.startswith("."):
        return x if names is None else names.get(x)
    parts = op.split(".")
    if names is None:
        return ".".join(parts[:-1]) + x
    for k in range(len(parts) - 1, -1, -1):
        cand = ".".join(parts[:k]) + x if k else x[1:]
        if cand in names:
            return names[cand]
    return None


def num(v: int) -> str:
    """A number as a word: exact up to 64, else its log2 to the half."""
    return str(v) if v <= 64 else f"~{round(math.log2(v) * 2) / 2:g}"


def rows_prompt(rows: list[Row], sms: int | None = None) -> str:
    """What the policy reads: one line per row (kind, readers' kinds, shape, grid), `repeat`/`end` around
    a repeat block's rows."""
    kind = {r.name: r.kind for r in rows}
    out, inside = [f"sms {num(sms)}" if sms else "sms ?"], False
    for r in policy_rows(rows):
        if (r.layers is not None) != inside:
            inside = r.layers is not None
            out.append("repeat" if inside else "end")
        readers = sorted({kind[n] for n in r.readers}) or ["none"]
        out.append(" ".join([r.kind, "<"] + readers + ["shape"] + [num(d) for d in r.out]
                            + ["grid", num(r.tiles), num(r.size)]) + " ;")
    if inside:
        out.append("end")
    return "\n".join(out)


def sms_of(text: str) -> int | None:
    m = re.search(r"mkir v1 \S+ sms=(\d+)", text)
    return int(m.group(1)) if m else None


def prompt_of(obs_text: str) -> tuple[str, list[Row]]:
    """(the policy's prompt, the rows: all of them; policy_rows are the ones it decides for) from an
    observation's text."""
    rows = ir_rows(obs_text)
    return rows_prompt(rows, sms_of(ir_section(obs_text))), rows


def parse_decisions(completion: str, n_rows: int) -> list[list[str]]:
    """A completion as one list of decision words per row; missing rows are `-`, extra ones dropped,
    unknown words ignored."""
    segs = [s.split() for s in completion.replace("\n", " ").split(";")][:n_rows]
    segs += [[] for _ in range(n_rows - len(segs))]
    ok = re.compile(r"^(fuse|inline|op|t\d{1,5}|s\d{1,2})$")
    return [[w for w in seg if ok.match(w)] for seg in segs]


def _spell(r: Row) -> str:
    return r.name.replace("{i}", f"{{{r.layers[0]}..{r.layers[1]}}}") if r.layers else r.name


def decisions_to_edits(rows: list[Row], completion: str) -> str:
    """The decisions (one per policy row) as edit lines, verb by verb in VERB_ORDER (fusions first, as
    the expert writes them), a written-out layer's rows taking their repeat-block row's."""
    by = {r.name: r for r in rows}
    mine = policy_rows(rows)
    said = dict(zip((r.name for r in mine), parse_decisions(completion, len(mine))))
    lines: dict[str, list[str]] = {v: [] for v in VERB_ORDER}
    for r in rows:
        for w in dict.fromkeys(said[r.alias_of or r.name]):
            if w == "fuse" and r.readers:
                into = by[r.readers[0]]
                lines["fuse"].append(f"fuse {_spell(r)} into {_spell(into) if into.layers == r.layers else '*'}")
            elif w == "op":
                lines["op"].append(f"counter {_spell(r)} op")
            elif w == "inline":
                lines["inline"].append(f"inline {_spell(r)}")
            elif w[0] == "s" and r.kind == "decode_attention" and 1 <= int(w[1:]) <= MAX_PARTS:
                lines["s"].append(f"split {_spell(r)} n={int(w[1:])}")
            elif w[0] == "t" and int(w[1:]) > 0:
                lines["t"].append(f"tile {_spell(r)} n={int(w[1:])}")
    return "\n".join(ln for v in VERB_ORDER for ln in lines[v])


def decisions_of(rows: list[Row], ir0, ir) -> str:
    """The completion that says what `ir` changed from the default `ir0` (both IR objects of one
    graph): the label a demonstration teaches. A repeat block's row reads its first layer."""
    from megakernel_gym.compiler.tasks import INLINE
    segs = []
    for r in policy_rows(rows):
        name = r.name.replace("{i}", str(r.layers[0])) if r.layers else r.name
        words = []
        if name in ir.fused:
            words.append("inline" if ir.fused[name] == INLINE else "fuse")
        if ir.knobs.counters.get(name) == "op" and ir0.knobs.counters.get(name) != "op":
            words.append("op")
        if ir.knobs.splits.get(name, 1) > 1:
            words.append(f"s{ir.knobs.splits[name]}")
        if ir.tile(name) != ir0.tile(name):
            words.append(f"t{ir.tile(name)}")
        segs.append(" ".join(words) or "-")
    return " ; ".join(segs) + " ;"


def apply_decisions(ir0, rows: list[Row], completion: str, max_drops: int | None = None):
    """(the edit text the IR took, the edited IR, lines dropped): the decisions' edit lines applied to
    `ir0`; where the IR refuses a line, that line is dropped and the rest tried again, as LMPolicy
    does with the env's feedback (a schedule the validator refuses as a whole leaves `ir0`, as does
    a `max_drops`-th refusal: every line left counts as dropped)."""
    from megakernel_gym.ir_exposure import EditError, apply_edits
    lines = decisions_to_edits(rows, completion).splitlines()
    dropped = 0
    while lines and (max_drops is None or dropped < max_drops):
        try:
            return "\n".join(lines), apply_edits(ir0, "\n".join(lines)), dropped
        except EditError as e:
            if e.index is None or not 1 <= e.index <= len(lines):
                break
            del lines[e.index - 1]
            dropped += 1
    return "", ir0, dropped + len(lines)


def demonstration(ir0, device: str = "H100", search: bool = True) -> dict:
    """A demonstration for the default IR `ir0`: the policy's prompt (from the IR text the env shows) and
    the completion of the best schedule found: the expert's, then (search=True) greedy over its
    split parts and q/k/v tile size by the sim's prediction. With the predicted times."""
    from megakernel_gym.compiler import predict
    from megakernel_gym.ir_exposure import apply_edits, render
    from megakernel_gym.policies.menu import try_edit
    from megakernel_gym.policies.expert import expert_edits
    text0 = render(ir0)
    prompt, rows = prompt_of(text0)
    score = lambda ir: predict(ir.plan(), device).latency_us  # noqa: E731
    base = score(ir0)
    expert = apply_edits(ir0, expert_edits(ir0))
    expert_us = score(expert)
    best_ir, best, how = expert, expert_us, "expert"
    if search:
        for variant in _variants(policy_rows(rows), decisions_of(rows, ir0, expert)):
            ir = try_edit(ir0, decisions_to_edits(rows, variant))
            if ir is not None:
                s = score(ir)
                if s < best * 0.998:           # a clear gain, not the sim's noise floor
                    best_ir, best, how = ir, s, "search"
    return {"prompt": prompt, "completion": decisions_of(rows, ir0, best_ir), "default_us": base,
            "expert_us": expert_us, "best_us": best, "source": how, "rows": len(policy_rows(rows))}


def _variants(rows: list[Row], completion: str) -> list[str]:
    """The completion with every attention split at other part counts, and with the tile of every row
    that the expert tiled (q/k/v's wave) halved and doubled."""
    segs = [seg.split() for seg in completion.split(";")][:len(rows)]
    out = []
    for parts in (1, 2, 4, 8, 16):
        new = [[w for w in seg if not w.startswith("s")] + ([f"s{parts}"] if r.kind == "decode_attention"
                                                            and parts > 1 else []) for r, seg in zip(rows, segs)]
        out.append(new)
    for f in (0.5, 2.0):
        new = [[f"t{int(int(w[1:]) * f)}" if w.startswith("t") else w for w in seg] for seg in segs]
        out.append(new)
    return [" ; ".join(" ".join(seg) or "-" for seg in new) + " ;" for new in out]


# -- the model ---------------------------------------------------------------------------------------

DECISION_WORDS = (["fuse", "inline", "op", "-", ";"] + [f"t{2 ** k}" for k in range(0, 13)]
                  + [f"s{n}" for n in range(2, 17)])    # what the policy may write; tile sizes are powers of 2


def vocabulary(prompts: list[str]) -> list[str]:
    """The tokenizer's words: specials, every word of the prompts, the decision words, every number word."""
    words = {w for p in prompts for w in p.split()}
    words |= set(DECISION_WORDS) | {"sms", "?", "repeat", "end", "<", "none", "shape", "grid", ARROW} | set(KINDS)
    words |= {str(v) for v in range(65)} | {f"~{k / 2:g}" for k in range(12, 50)}
    # <answer> marked the answer in a first format; it stays so that the shipped tokenizer's ids do not move
    return ["<pad>", "<unk>", "<eos>", "<answer>"] + sorted(words)


def make_lm(out: str | Path, prompts: list[str], n_layer: int = 4, n_embd: int = 128, n_head: int = 4,
            n_positions: int = 2048, seed: int = 0) -> str:
    """Save a word-level tokenizer over `prompts`' vocabulary and a randomly initialised GPT-2 beside it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {w: i for i, w in enumerate(vocabulary(prompts))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>",
                                   bos_token="<eos>")
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(fast), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                     bos_token_id=fast.eos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    from megakernel_gym.policies.quiet import library_noise_off
    with library_noise_off(wandb_quiet=False):     # no "Writing model shards" bar for a model of a few MB
        GPT2LMHeadModel(cfg).save_pretrained(out)
    return str(out)


ARROW = "=>"


def segments(prompt: str) -> tuple[str, list[str]]:
    """(the prompt's header, one text per policy row: its words, after a `repeat`/`end` marker that
    precedes it)."""
    lines = prompt.splitlines()
    rows, pending = [], []
    for ln in lines[1:]:
        if ln in ("repeat", "end"):
            pending.append(ln)
            continue
        rows.append(" ".join(pending + [ln.rstrip(" ;")]))
        pending = []
    return lines[0], rows


def sequence_ids(tok, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    """The model's sequence for a demonstration, and the mask of its decision tokens (what it learns
    to write): the header, then for each row its words, `=>`, its decision words and `;`. The row
    words come from the IR, so the policy decides with every earlier row and its own in view, and
    its decisions stay aligned with the rows whatever it writes."""
    head, rows = segments(prompt)
    ids = tok(head).input_ids
    mask = [0] * len(ids)
    for row, words in zip(rows, parse_decisions(completion, len(rows))):
        r = tok(f"{row} {ARROW}").input_ids
        d = tok(" ".join(words or ["-"]) + " ;").input_ids
        ids += r + d
        mask += [0] * len(r) + [1] * len(d)
    return ids, mask


def signature(row_text: str) -> str:
    """A row text's kind and its readers' kinds (`matmul < rope`): what its decision mostly rests on."""
    words = row_text.replace("repeat ", "").replace("end ", "").split()
    return " ".join(words[:words.index("shape")] if "shape" in words else words)


def augment(prompt: str, completion: str, known: set[str], rng, rows: int = 3) -> tuple[str, str]:
    """The demonstration with up to `rows` made-up rows inserted at random places, each of a kind and
    readers no demonstration has (not in `known` signatures), decided `-`: so the policy reads a row's
    content rather than its place, and leaves a row it has never seen alone (a held-out family's
    new ops, such as Qwen3's per-head norms, shift every later row)."""
    head, rows_text = segments(prompt)
    decisions = [" ".join(w) or "-" for w in parse_decisions(completion, len(rows_text))]
    pairs = list(zip(rows_text, decisions))
    for _ in range(rng.randint(1, rows)):
        for _ in range(20):
            kind = rng.choice(KINDS)
            readers = sorted(rng.sample(KINDS, rng.randint(1, 2))) if rng.random() < 0.9 else ["none"]
            sig = " ".join([kind, "<"] + readers)
            if sig not in known:
                break
        else:
            continue
        dims = [num(rng.choice((1, 2, 4, 8, 16, 64, 128, 512, 1024, 4096))) for _ in range(rng.randint(2, 3))]
        grid = [num(rng.choice((1, 2, 8, 16, 64, 128, 256))), num(rng.choice((1, 2, 8, 16, 32)))]
        k = rng.randint(0, len(pairs))
        pairs.insert(k, (" ".join([sig, "shape"] + dims + ["grid"] + grid), "-"))
    lines = [head] + [f"{r} ;" for r, _ in pairs]
    return "\n".join(lines), " ; ".join(d for _, d in pairs) + " ;"


def action_words(demos: list[tuple[str, str]]) -> dict:
    """The decision words each row signature and each row kind was given in the demonstrations
    (`t*`/`s*` standing for any tile size or split): the policy's action mask, learned from the data
    (decide). A row of a signature never shown may take its kind's words but `fuse` and `inline`,
    which act through its readers (fusing Qwen3's q_proj into the per-head norm that reads it is
    legal and predicted 2.6x slower)."""
    sigs: dict[str, set] = {}
    kinds: dict[str, set] = {}
    for prompt, completion in demos:
        rows = segments(prompt)[1]
        for row, words in zip(rows, parse_decisions(completion, len(rows))):
            ws = {w if w in ("fuse", "inline", "op") else w[0] + "*" for w in words}
            sigs.setdefault(signature(row), set()).update(ws)
            kinds.setdefault(signature(row).split()[0], set()).update(ws)
    return {"signatures": {k: sorted(v) for k, v in sigs.items()}, "kinds": {k: sorted(v) for k, v in kinds.items()}}


def _allowed(row: str, actions: dict | None) -> list[str]:
    if actions is None:
        return list(DECISION_WORDS)
    sig = signature(row)
    ws = actions["signatures"].get(sig)
    if ws is None:
        ws = [w for w in actions["kinds"].get(sig.split()[0], []) if w not in ("fuse", "inline")]
    out = ["-", ";"]
    for w in ws:
        out += [d for d in DECISION_WORDS if d[0] == w[0] and d[1:].isdigit()] if w.endswith("*") else [w]
    return out


@functools.lru_cache(maxsize=None)
def _cache_argument(model_class) -> str:
    """The key-value cache's argument of a model class's forward: `cache` from transformers 5.2x
    (past_key_values is deprecated there), past_key_values before (looked up once a class: decide runs it
    every rollout)."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def decide(model, tok, prompt: str, sample: bool = False, generator=None, max_words: int = 4,
           actions: dict | None = None) -> dict:
    """The model's decisions for a prompt: each row's words fed in, then decision words drawn (greedy,
    or sampled from the softmax over the words the row may take: action_words' mask, or every
    decision word) until `;`. Returns the completion (`dec ; dec ; ...`) and, for GRPO, the token ids
    after the header, which of them the model drew (env_mask) and their log-probabilities."""
    import torch
    head, rows = segments(prompt)
    stop = tok.convert_tokens_to_ids(";")
    prompt_ids = tok(head).input_ids
    out_ids, env_mask, logprobs, decisions = [], [], [], []
    past = None
    cache = _cache_argument(type(model))

    def feed(ids):
        nonlocal past
        o = model(input_ids=torch.tensor([ids]), use_cache=True, **{cache: past})
        past = getattr(o, cache)
        return o.logits[0, -1]

    with torch.no_grad():
        logits = feed(prompt_ids)
        for row in rows:
            allowed = torch.tensor(tok.convert_tokens_to_ids(_allowed(row, actions)))
            r = tok(f"{row} {ARROW}").input_ids
            logits = feed(r)
            out_ids += r
            env_mask += [0] * len(r)
            logprobs += [0.0] * len(r)
            words = []
            for k in range(max_words):
                lp = torch.log_softmax(logits.float()[allowed], -1)
                pick = int(torch.multinomial(lp.exp(), 1, generator=generator)) if sample else int(lp.argmax())
                tid = int(allowed[pick])
                out_ids.append(tid)
                env_mask.append(1)
                logprobs.append(float(lp[pick]))
                logits = feed([tid])
                if tid == stop:
                    break
                words.append(tok.convert_ids_to_tokens(tid))
            else:                                   # a row's decision ends at `;`, written or not
                out_ids.append(stop)
                env_mask.append(0)
                logprobs.append(0.0)
                logits = feed([stop])
            decisions.append(" ".join(w for w in words if w != "-") or "-")
    return {"completion": " ; ".join(decisions) + " ;", "prompt_ids": prompt_ids, "completion_ids": out_ids,
            "env_mask": env_mask, "logprobs": logprobs}


def decisions_from_text(text: str) -> str:
    """A decoded sequence (`row words => dec ; ...`) as the completion of its decisions."""
    return " ; ".join(seg.split(ARROW, 1)[1].strip() if ARROW in seg else "" for seg in text.split(";")[:-1]) + " ;"


class LMGenerator:
    """Greedy (or sampled) decisions from a saved policy model (`decide`)."""

    def __init__(self, path: str | Path | None = None):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        path = Path(path) if path else SHIPPED_MODEL
        if not (path / "config.json").is_file():
            raise PolicyTextError(f"no policy model at {str(path)!r}; train one with `python bench/learning_lm.py` "
                                  "or give the folder it saved")
        from megakernel_gym.policies.quiet import library_noise_off
        with library_noise_off(wandb_quiet=False):      # no progress bar for a model of a few MB
            self.tok = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        mask = path / ACTIONS_FILE
        self.actions = json.loads(mask.read_text()) if mask.is_file() else None

    def __call__(self, prompt: str, n_rows: int | None = None, sample: bool = False, seed: int = 0) -> str:
        import torch
        gen = torch.Generator().manual_seed(seed)
        return decide(self.model, self.tok, prompt, sample=sample, generator=gen, actions=self.actions)["completion"]


__all__ = ["Row", "ir_rows", "policy_rows", "rows_prompt", "prompt_of", "parse_decisions", "decisions_to_edits",
           "decisions_of", "make_lm", "LMGenerator", "demonstration", "apply_decisions", "PolicyTextError",
           "SHIPPED_MODEL", "vocabulary", "segments", "sequence_ids", "decide", "decisions_from_text", "augment", "signature", "action_words",
           "ACTIONS_FILE"]
