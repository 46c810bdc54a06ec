"""A small transformer policy for level 5 trained with TRL (policies/lm.py): SFT on the expert's and the
search's schedules, then GRPO on the sim's rewards, scored on the held-out model families as it trains.

    python bench/learning_lm.py [--run runs/lm] [--configs 96] [--sft-epochs 12] [--grpo-steps 30]
                                [--augment 3] [--save megakernel_gym/policies/lm_policy] [--out bench/results]

1. Demonstrations. Model shapes drawn at random from the training families (transformers' Llama,
   Qwen2, GPT-2 and Mixtral at 3 layers: one layer written out and a repeat block, as a real model's
   IR text shows them) and the level-5 train problems at their own shapes. For each, the policy's
   prompt (from the IR text) and the completion of the best schedule: the expert's, or better where
   a greedy search over its split parts and q/k/v tiles finds it by the sim (H100 constants).
2. SFT (trl.SFTTrainer, loss on the decision tokens) of a GPT-2 from a config (4 layers, width 128)
   with a word-level tokenizer over the prompts' words; its sequence is each row's words, `=>`, the
   row's decision and `;` (policies.lm.sequence_ids), so decisions stay aligned with rows. Each
   demonstration also comes in `--augment` copies with made-up rows of kinds no demonstration has,
   decided `-` (policies.lm.augment: without them the policy read rows by their place, and a
   held-out family's new ops shifted every later decision). The decisions a row may take are the
   words its signature was given in the demonstrations (policies.lm.action_words, saved beside the
   model): without that mask a first policy tiled Qwen3's attention 16 heads a task, legal and
   predicted 2.5x slower (as is fusing its q_proj into the per-head norm that reads it).
3. GRPO (trl.GRPOTrainer with a rollout_func: rows fed in, decisions sampled, rows masked out of the
   loss) from the SFT model on the same IRs: 8 sampled completions per prompt, the reward the sim's
   log speedup over the default schedule of what the IR took (the sim backend's own prediction), less
   0.05 per edit line the IR refused.
Between phases and every few steps the greedy policy plays the level-5 held-out problems at their
real shapes (apply_decisions: refused lines dropped, as LMPolicy does in the env): the curve.

Writes learning_lm.json (the curve, and per held-out problem the sim's speedup over the default for
the policy, the expert, the heuristic and the search), learning_lm.png, an offline W&B run under
RUN/wandb, the demonstrations (RUN/demos.jsonl, reused when present) and the final model to --save.
CPU only.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402

TRAIN_FAMILIES = ("hf-llama", "qwen2", "gpt2", "mixtral")
HELDOUT_FAMILY_PROBLEMS = ("mk_qwen3_0p6b", "mk_qwen3_1p7b", "mk_mistral_window", "mk_mistral_window_batch2")
DEVICE = "H100"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sample_config(fam: str, rng: random.Random):
    """A random model shape of a family at 3 layers."""
    from megakernel_gym.compiler.families import FamilyConfig
    head_dim = rng.choice((64, 64, 128))
    hidden = rng.choice((512, 768, 896, 1024, 1536, 2048, 2560, 3072))
    if hidden % head_dim:
        head_dim = 64
    q = hidden // head_dim
    kv = q if fam == "gpt2" else rng.choice([k for k in (1, 2, 4, 8, q) if q % k == 0])
    ffn = int(hidden * rng.choice((2.5, 3.0, 3.5, 4.0, 5.5))) // 128 * 128
    extra = {}
    if fam == "mixtral":
        experts = rng.choice((2, 4, 8))
        extra = {"num_local_experts": experts, "num_experts_per_tok": 2}
        ffn = ffn // 2 // 128 * 128
    base = FamilyConfig.tiny(fam)
    return type(base)(**{**base.__dict__, "hidden": hidden, "layers": 3, "q_heads": q, "kv_heads": kv,
                         "head_dim": head_dim, "ffn": ffn, "vocab": rng.choice((32000, 50257, 128256)),
                         "max_seq": rng.choice((512, 1024, 2048, 4096)), "batch": rng.choice((1, 1, 2, 4)),
                         "dtype": "bfloat16", "tie_embeddings": fam == "gpt2", "extra": extra})


def config_ir(fam: str, cfg):
    from megakernel_gym.compiler import capture
    from megakernel_gym.compiler.zoo import make_block
    from megakernel_gym.ir_exposure import make_ir
    return make_ir(capture(*make_block(fam, cfg, device="meta"), f"{fam}-synthetic"), num_sms=132)


def problem_irs(split: str) -> dict:
    """The level-5 problems of a split, as default IRs at their GPU shapes (132 SMs)."""
    from families_gpu import problem_ir

    from megakernel_gym.curriculum import builtin_suite
    names = [p.name for p in builtin_suite().problems if p.level == 5 and p.meta.get("SPLIT") == split]
    out = {}
    for n in names:
        t = time.perf_counter()
        out[n] = problem_ir(n, 132)[3]
        log(f"  {n}: {time.perf_counter() - t:.1f} s")
    return out


def demos(run: Path, n_configs: int, seed: int, train: dict) -> list[dict]:
    from megakernel_gym.policies.lm import demonstration
    path = run / "demos.jsonl"
    if path.is_file():
        rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
        log(f"demonstrations: {len(rows)} from {path}")
        return rows
    rng = random.Random(seed)
    rows = []
    for k in range(n_configs):
        fam = TRAIN_FAMILIES[k % len(TRAIN_FAMILIES)]
        cfg = sample_config(fam, rng)
        t = time.perf_counter()
        try:
            d = demonstration(config_ir(fam, cfg), DEVICE)
        except Exception as e:  # noqa: BLE001 - a shape the compiler refuses is skipped, and said
            log(f"  config {k} ({fam}) skipped: {type(e).__name__}: {str(e)[:200]}")
            continue
        rows.append({"key": f"{fam}-{k}", "family": fam, "config": {**cfg.__dict__}, **d})
        log(f"  demo {k} {fam} h{cfg.hidden} q{cfg.q_heads}/kv{cfg.kv_heads} b{cfg.batch} s{cfg.max_seq}: "
            f"{d['default_us'] / d['best_us']:.3f}x ({d['source']}) {time.perf_counter() - t:.1f} s")
    for name, ir0 in train.items():
        d = demonstration(ir0, DEVICE)
        rows.append({"key": name, "family": "problem", **d})
        log(f"  demo {name}: {d['default_us'] / d['best_us']:.3f}x ({d['source']})")
    run.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


class Scorer:
    """The greedy policy on default IRs: the sim's speedup over the default for each."""

    def __init__(self, irs: dict):
        from megakernel_gym.compiler import predict
        from megakernel_gym.ir_exposure import render
        from megakernel_gym.policies.lm import prompt_of
        self.irs = irs
        self.prompts = {n: prompt_of(render(ir)) for n, ir in irs.items()}
        self.base = {n: predict(ir.plan(), DEVICE).latency_us for n, ir in irs.items()}

    def __call__(self, model, tok, actions=None) -> dict:
        from megakernel_gym.compiler import predict
        from megakernel_gym.policies.lm import apply_decisions, decide
        out = {}
        model.eval()
        for n, (prompt, rows) in self.prompts.items():
            completion = decide(model, tok, prompt, actions=actions)["completion"]
            text, ir, dropped = apply_decisions(self.irs[n], rows, completion)
            out[n] = {"speedup": self.base[n] / predict(ir.plan(), DEVICE).latency_us, "dropped": dropped,
                      "edit_lines": len(text.splitlines()) if text else 0}
        model.train()
        return out


def finish_wandb() -> None:
    """Close this phase's W&B run (offline unless the user set WANDB_MODE), so the next phase gets its own."""
    try:
        import wandb
        if wandb.run is not None:
            wandb.finish()
    except ImportError:
        pass


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def point(phase: str, step: int, held: dict, train: dict | None = None) -> dict:
    fam = [held[n]["speedup"] for n in HELDOUT_FAMILY_PROBLEMS if n in held]
    p = {"phase": phase, "step": step, "heldout_family_geomean": geomean(fam),
         "heldout_geomean": geomean(v["speedup"] for v in held.values()),
         "heldout_dropped_lines": sum(v["dropped"] for v in held.values()),
         "per_problem": {n: round(v["speedup"], 4) for n, v in held.items()}}
    if train:
        p["train_geomean"] = geomean(v["speedup"] for v in train.values())
    log(f"[{phase} {step}] held-out families {p['heldout_family_geomean']:.4f}x, all held-out "
        f"{p['heldout_geomean']:.4f}x, refused lines {p['heldout_dropped_lines']}")
    return p


def curve_callback(scorer, curve: list, phase: str, every: int, tok, actions, offset: int = 0):
    from transformers import TrainerCallback

    class Curve(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if every and state.global_step % every == 0:
                curve.append(point(phase, offset + state.global_step, scorer(model, tok, actions)))
                try:
                    import wandb
                    if wandb.run is not None:
                        wandb.log({"heldout/family_geomean_speedup": curve[-1]["heldout_family_geomean"],
                                   "heldout/geomean_speedup": curve[-1]["heldout_geomean"]}, commit=False)
                except ImportError:
                    pass

    return Curve()


class SimReward:
    """GRPO's reward: the sim's log speedup over the default schedule of what the IR took, less 0.05
    for each line it refused."""

    def __init__(self, irs: dict):
        from megakernel_gym.compiler import predict
        from megakernel_gym.ir_exposure import render
        from megakernel_gym.policies.lm import prompt_of
        self.irs = irs
        self.rows = {k: prompt_of(render(ir))[1] for k, ir in irs.items()}
        self.base = {k: predict(ir.plan(), DEVICE).latency_us for k, ir in irs.items()}
        self.cache: dict = {}
        self.__name__ = "sim_reward"

    def __call__(self, prompts=None, completions=None, key=None, **kw) -> list[float]:
        from megakernel_gym.compiler import predict
        from megakernel_gym.policies.lm import apply_decisions, decisions_from_text, decisions_to_edits
        out = []
        for c, k in zip(completions, key):
            c = decisions_from_text(c)
            edits = decisions_to_edits(self.rows[k], c)
            if (k, edits) not in self.cache:
                _, ir, dropped = apply_decisions(self.irs[k], self.rows[k], c, max_drops=4)
                self.cache[(k, edits)] = math.log(self.base[k] / predict(ir.plan(), DEVICE).latency_us) - 0.05 * dropped
            out.append(self.cache[(k, edits)])
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default=str(ROOT / "runs" / "lm"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--save", default=str(ROOT / "megakernel_gym" / "policies" / "lm_policy"))
    ap.add_argument("--configs", type=int, default=96)
    ap.add_argument("--sft-epochs", type=int, default=12)
    ap.add_argument("--augment", type=int, default=3, help="copies of each demonstration with made-up rows")
    ap.add_argument("--grpo-steps", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    run = Path(args.run)
    run.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_DIR", str(run.resolve()))
    os.environ.setdefault("WANDB_PROJECT", "megakernel-gym")
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from megakernel_gym.compiler import predict
    from megakernel_gym.ir_exposure import apply_edits, tuned_edits
    from megakernel_gym.policies.expert import expert_edits
    from megakernel_gym.policies.lm import (ACTIONS_FILE, action_words, augment, decide, make_lm, segments,
                                            sequence_ids, signature)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    log("level-5 problems (held out, then train):")
    held, train = problem_irs("heldout"), problem_irs("train")
    log("demonstrations:")
    rows = demos(run, args.configs, args.seed, train)
    scorer = Scorer(held)
    curve: list[dict] = []

    # -- SFT
    init = make_lm(run / "init", [r["prompt"] for r in rows], seed=args.seed)
    tok = AutoTokenizer.from_pretrained(init)
    # the action mask: the words each row signature (and kind) was given in the demonstrations
    actions = action_words([(r["prompt"], r["completion"]) for r in rows])
    curve.append(point("init", 0, scorer(AutoModelForCausalLM.from_pretrained(init), tok, actions)))
    # each demonstration as it is and in `--augment` copies with made-up rows of unseen kinds (decided `-`)
    known = {signature(r) for d in rows for r in segments(d["prompt"])[1]}
    rng = random.Random(args.seed)
    texts = [(r["prompt"], r["completion"]) for r in rows]
    texts += [augment(p, c, known, rng) for p, c in texts for _ in range(args.augment)]
    seqs = [sequence_ids(tok, p, c) for p, c in texts]
    ds = datasets.Dataset.from_list([{"input_ids": ids, "completion_mask": mask} for ids, mask in seqs]
                                    ).shuffle(seed=args.seed)
    steps_per_epoch = math.ceil(len(ds) / 8)
    sft_args = SFTConfig(output_dir=str(run / "sft"), num_train_epochs=args.sft_epochs, per_device_train_batch_size=8,
                         learning_rate=2e-3, lr_scheduler_type="cosine", warmup_steps=10, max_length=2048,
                         completion_only_loss=True, logging_steps=5, gradient_checkpointing=False,
                         save_strategy="no", report_to="wandb", run_name="lm-policy-sft", use_cpu=True, bf16=False,
                         seed=args.seed)
    sft = SFTTrainer(model=init, args=sft_args, train_dataset=ds, processing_class=tok,
                     callbacks=[curve_callback(scorer, curve, "sft", steps_per_epoch * 2, tok, actions)])
    sft.train()
    sft.save_model(str(run / "sft"))
    tok.save_pretrained(run / "sft")
    sft_steps = sft.state.global_step
    after_sft = point("sft", sft_steps, scorer(sft.model, tok, actions))
    curve.append(after_sft)
    finish_wandb()
    log(f"SFT done at {time.perf_counter() - t0:.0f} s")

    # -- GRPO on the sim's rewards, from the SFT model
    synth = {}
    for r in rows:
        if r["family"] != "problem" and len(synth) < 32:
            from megakernel_gym.compiler.families import config_from_dict
            synth[r["key"]] = config_ir(r["family"], config_from_dict(r["config"]))
    irs = {**synth, **train}
    reward = SimReward(irs)
    from megakernel_gym.ir_exposure import render
    from megakernel_gym.policies.lm import prompt_of
    gds = datasets.Dataset.from_list([{"prompt": prompt_of(render(ir))[0], "key": k}
                                      for k, ir in irs.items()]).shuffle(seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    def rollout(prompts, trainer):
        """GRPO's generations: each row's words fed in, the decisions sampled (policies.lm.decide); the
        row tokens are masked out of the loss (env_mask 0). TRL passes each prompt once per generation
        (then one each) or once (then num_generations each)."""
        n = 1 if len(set(prompts)) < len(prompts) else trainer.num_generations
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
        trainer.model.eval()
        for p in prompts:
            for _ in range(n):
                d = decide(trainer.model, tok, p, sample=True, generator=gen, actions=actions)
                for k in out:
                    out[k].append(d[k])
        trainer.model.train()
        return out

    grpo_args = GRPOConfig(output_dir=str(run / "grpo"), max_steps=args.grpo_steps, per_device_train_batch_size=16,
                           num_generations=8, learning_rate=1e-4, beta=0.0, temperature=1.0,
                           max_completion_length=6 * 120, logging_steps=1, gradient_checkpointing=False,
                           save_strategy="no", report_to="wandb", run_name="lm-policy-grpo", use_cpu=True, bf16=False,
                           seed=args.seed, log_completions=False, disable_dropout=True)
    grpo = GRPOTrainer(model=str(run / "sft"), reward_funcs=[reward], args=grpo_args, train_dataset=gds,
                       processing_class=tok, rollout_func=rollout,
                       callbacks=[curve_callback(scorer, curve, "grpo", args.eval_every, tok, actions, offset=sft_steps)])
    grpo.train()
    final = point("grpo", sft_steps + grpo.state.global_step, scorer(grpo.model, tok, actions))
    if not curve or curve[-1]["step"] != final["step"]:
        curve.append(final)
    rewards = [h["reward"] for h in grpo.state.log_history if "reward" in h]
    finish_wandb()
    log(f"GRPO done at {time.perf_counter() - t0:.0f} s")

    # the model that ships: GRPO's unless the sim scores it below SFT's on the training problems
    train_scorer = Scorer(train)
    sft_model = AutoModelForCausalLM.from_pretrained(run / "sft")
    s_sft, s_grpo = train_scorer(sft_model, tok, actions), train_scorer(grpo.model, tok, actions)
    g_sft, g_grpo = geomean(v["speedup"] for v in s_sft.values()), geomean(v["speedup"] for v in s_grpo.values())
    chosen = "grpo" if g_grpo >= g_sft else "sft"
    (grpo.model if chosen == "grpo" else sft_model).save_pretrained(args.save)
    tok.save_pretrained(args.save)
    (Path(args.save) / ACTIONS_FILE).write_text(json.dumps(actions, indent=1))
    log(f"train problems (sim): sft {g_sft:.4f}x, grpo {g_grpo:.4f}x; saved {chosen} to {args.save}")

    # the other policies on the same held-out problems, by the same sim
    # (the search's sim speedups from policies_gpu.py's plan, which plays it: 3-4 minutes a problem here)
    planned = ROOT / "bench" / "schedules" / "policies_heldout.json"
    plan = json.loads(planned.read_text()) if planned.is_file() else {}
    others = {}
    for n, ir0 in held.items():
        base = scorer.base[n]
        sp = lambda ir: base / predict(ir.plan(), DEVICE).latency_us  # noqa: E731
        others[n] = {"heuristic": sp(apply_edits(ir0, tuned_edits(ir0))),
                     "expert": sp(apply_edits(ir0, expert_edits(ir0))),
                     "search": plan.get(n, {}).get("search", {}).get("sim_speedup"),
                     "lm": (final if chosen == "grpo" else after_sft)["per_problem"][n]}
    table = [{"problem": n, "heldout_family": n in HELDOUT_FAMILY_PROBLEMS,
              **{f"{k}_sim_speedup": round(v, 4) if v else None for k, v in o.items()}} for n, o in others.items()]
    fam = lambda k: geomean(o[k] for n, o in others.items() if n in HELDOUT_FAMILY_PROBLEMS)  # noqa: E731
    lm_sim = fam("lm")
    targets = [{"target": "the trained policy's sim geomean speedup over the default on the held-out families "
                          ">= the expert's (what it was shown)", "measured": round(lm_sim, 4),
                "expert": round(fam("expert"), 4), "met": bool(lm_sim >= fam("expert") - 1e-9)},
               {"target": "the trained policy beats its untrained start (curve)",
                "measured": [round(curve[0]["heldout_family_geomean"], 4), round(lm_sim, 4)],
                "met": bool(lm_sim > curve[0]["heldout_family_geomean"])}]
    out = Path(args.out)
    write("learning_lm", [{"curve": curve}, {"heldout": table},
                          {"demos": len(rows), "augmented_copies": args.augment, "search_improved": sum(r["source"] == "search" for r in rows),
                           "sft_steps": sft_steps, "grpo_steps": grpo.state.global_step, "grpo_rewards": rewards,
                           "train_problems_sim": {"sft": g_sft, "grpo": g_grpo}, "shipped": chosen,
                           "seconds": round(time.perf_counter() - t0)}],
          targets, out, prefix="",
          notes=f"sim backend ({DEVICE} constants); held-out = the level-5 heldout split at its GPU shapes; "
                f"the GPU measurement of these policies is bench/learning_gpu.py --policies ...,lm")
    curve_png(curve, fam("expert"), out / "learning_lm.png")


def curve_png(curve: list[dict], expert: float, path: Path, w: int = 760, h: int = 420) -> None:
    from PIL import Image, ImageDraw
    pad_l, pad_r, pad_t, pad_b = 70, 20, 40, 50
    xs = [p["step"] for p in curve]
    ys = [p["heldout_family_geomean"] for p in curve]
    lo, hi = min(ys + [1.0, expert]) - 0.02, max(ys + [1.0, expert]) + 0.02
    img = Image.new("RGB", (w, h), (255, 255, 255))
    d = ImageDraw.Draw(img)
    X = lambda x: pad_l + (x - min(xs)) / max(1, max(xs) - min(xs)) * (w - pad_l - pad_r)  # noqa: E731
    Y = lambda y: h - pad_b - (y - lo) / (hi - lo) * (h - pad_t - pad_b)  # noqa: E731
    d.line([(pad_l, pad_t), (pad_l, h - pad_b), (w - pad_r, h - pad_b)], fill=(0, 0, 0))
    for y, label, col in ((1.0, "default schedule", (150, 150, 150)), (expert, "expert", (200, 120, 0))):
        d.line([(pad_l, Y(y)), (w - pad_r, Y(y))], fill=col)
        d.text((w - pad_r - 110, Y(y) - 14), f"{label} {y:.3f}x", fill=col)
    sft_end = max((p["step"] for p in curve if p["phase"] in ("init", "sft")), default=0)
    d.line([(X(sft_end), pad_t), (X(sft_end), h - pad_b)], fill=(180, 180, 255))
    d.text((X(sft_end) + 4, pad_t), "SFT | GRPO", fill=(80, 80, 200))
    d.line([(X(x), Y(y)) for x, y in zip(xs, ys)], fill=(20, 90, 200), width=2)
    for x, y in zip(xs, ys):
        d.ellipse([X(x) - 3, Y(y) - 3, X(x) + 3, Y(y) + 3], fill=(20, 90, 200))
    for k in range(5):
        y = lo + (hi - lo) * k / 4
        d.text((5, Y(y) - 6), f"{y:.2f}x", fill=(0, 0, 0))
    d.text((pad_l, 10), "lm policy: sim geomean speedup over the default, held-out families (greedy)", fill=(0, 0, 0))
    d.text((pad_l, h - 30), "training step (SFT, then GRPO)", fill=(0, 0, 0))
    img.save(path)


if __name__ == "__main__":
    main()
