"""The per-SM schedule timeline as a picture: one row per SM, time left to right, each task a bar
colored by what it computes (its op's kind; a matmul with a fused epilogue is a matmul). Drawn with
numpy alone (rgb_array); Pillow writes it as a PNG."""
from __future__ import annotations

import numpy as np

# One color per primitive kind (graph.PRIMITIVES), so the same picture reads the same for any model.
KIND_COLORS = {"matmul": (31, 119, 180), "elementwise": (255, 127, 14), "reduce": (44, 160, 44),
               "rmsnorm": (214, 39, 40), "layernorm": (214, 39, 40), "softmax": (148, 103, 189),
               "rope": (140, 86, 75), "decode_attention": (227, 119, 194), "cache_write": (127, 127, 127),
               "embedding": (188, 189, 34), "view": (23, 190, 207)}
BACKGROUND = (255, 255, 255)
IDLE = (235, 235, 235)
LAUNCH = (90, 90, 90)      # the kernel's launch, before any task starts (costmodel.DeviceSpec.launch_us)


def task_kinds(plan) -> list[str]:
    """What each task computes, by primitive kind: its op's, or a matmul's where a matmul is fused
    into it (a fused task's op is the consumer, an elementwise op, but its time is the matmul's)."""
    kinds = {o.name: o.kind for o in plan.tg.graph.ops}
    out = []
    for t in plan.tg.tasks:
        k = kinds.get(t.op, "")
        if k != "matmul" and any(kinds.get(p) == "matmul" for p, _ in (t.prologue or ())):
            k = "matmul"
        out.append(k)
    return out


def timeline_image(plan, prediction, width: int = 1200, row_px: int = 4, gap_px: int = 1,
                   end_us: float | None = None, launch_us: float = 0.0) -> np.ndarray:
    """[height, width, 3] uint8: SM s occupies rows s*(row_px+gap_px) .. +row_px. end_us: the time at
    the right edge (default: this schedule's end; give two pictures one to compare them). launch_us:
    the kernel's launch, drawn first on every SM (LAUNCH) with the tasks after it, so the bars end at
    the predicted latency (costmodel.predict adds the launch to the last task's finish)."""
    kinds = task_kinds(plan)
    end = end_us or (max(prediction.finish_us, default=0.0) + launch_us) or 1.0
    n_sms = len(plan.queues)
    height = n_sms * (row_px + gap_px)
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    scale = (width - 1) / end
    for s, queue in enumerate(plan.queues):
        y0 = s * (row_px + gap_px)
        img[y0:y0 + row_px, :] = IDLE
        if launch_us > 0:
            img[y0:y0 + row_px, :max(1, int(launch_us * scale))] = LAUNCH
        for t in queue:
            x0 = int((prediction.start_us[t] + launch_us) * scale)
            x1 = max(x0 + 1, int((prediction.finish_us[t] + launch_us) * scale))
            img[y0:y0 + row_px, x0:x1] = KIND_COLORS.get(kinds[t], (0, 0, 0))
    return img


def with_axes(img: np.ndarray, plan, prediction, title: str = "", end_us: float | None = None,
              launch_us: float = 0.0) -> np.ndarray:
    """The timeline with what a reader needs around it: a title, a time axis in us, the SM axis,
    and a legend of the op kinds that appear, and of the launch where timeline_image drew one
    (Pillow draws the text)."""
    from PIL import Image, ImageDraw
    present = [k for k in KIND_COLORS if k in set(task_kinds(plan))]
    end = end_us or (max(prediction.finish_us, default=0.0) + launch_us) or 1.0
    left, top, bottom = 56, 34, 58
    h, w = img.shape[:2]
    canvas = Image.new("RGB", (w + left + 16, h + top + bottom), BACKGROUND)
    canvas.paste(Image.fromarray(img), (left, top))
    d = ImageDraw.Draw(canvas)
    d.text((left, 8), title, fill=(0, 0, 0))
    step = 10 ** int(np.floor(np.log10(end / 4))) if end > 0 else 1.0
    for mult in (1, 2, 5):
        if end / (step * mult) <= 8:
            step *= mult
            break
    t = 0.0
    while t <= end:
        x = left + int(t * (w - 1) / end)
        d.line([x, top + h, x, top + h + 4], fill=(0, 0, 0))
        d.text((x - 10, top + h + 6), f"{t:g}", fill=(0, 0, 0))
        t += step
    d.text((left + w // 2 - 30, top + h + 20), "time (us)", fill=(0, 0, 0))
    d.text((4, top), "SM 0", fill=(0, 0, 0))
    d.text((4, top + h - 12), f"SM {len(plan.queues) - 1}", fill=(0, 0, 0))
    x = left
    launch = [f"kernel launch ({launch_us:.2f} us)"] if launch_us > 0 else []
    for k in launch + present + ["idle"]:
        color = IDLE if k == "idle" else LAUNCH if k in launch else KIND_COLORS[k]
        d.rectangle([x, top + h + 40, x + 10, top + h + 50], fill=color, outline=(120, 120, 120))
        d.text((x + 14, top + h + 39), k, fill=(0, 0, 0))
        x += 24 + 7 * len(k)
    return np.asarray(canvas)


def stack(images: list[np.ndarray], gap_px: int = 8) -> np.ndarray:
    """Pictures one above the other (padded to the widest), on the background color."""
    w = max(i.shape[1] for i in images)
    h = sum(i.shape[0] for i in images) + gap_px * (len(images) - 1)
    out = np.empty((h, w, 3), dtype=np.uint8)
    out[:] = BACKGROUND
    y = 0
    for i in images:
        out[y:y + i.shape[0], :i.shape[1]] = i
        y += i.shape[0] + gap_px
    return out


def save_png(img: np.ndarray, path: str) -> None:
    from pathlib import Path

    from PIL import Image   # Pillow: the PNG writer everyone has
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path)


def times_image(result, width: int = 600, bar_px: int = 24) -> np.ndarray:
    """Op-level episodes: one bar per baseline and one for the candidate (dark), lengths in
    proportion to their median times; empty until something was timed."""
    bars = [(name, b["median_ms"]) for name, b in (getattr(result, "baselines", None) or {}).items()
            if isinstance(b, dict) and b.get("median_ms")]
    t = getattr(result, "timing", None) or {}
    if t.get("median_ms"):
        bars.append(("candidate", t["median_ms"]))
    img = np.empty((max(1, len(bars)) * (bar_px + 4) + 4, width, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    if not bars:     # said in words rather than a blank picture
        from PIL import Image, ImageDraw
        canvas = Image.fromarray(img)
        ImageDraw.Draw(canvas).text((6, 8), "nothing timed yet (the cpu backend checks correctness only)",
                                    fill=(0, 0, 0))
        return np.asarray(canvas).copy()
    longest = max((ms for _, ms in bars), default=1.0)
    for i, (name, ms) in enumerate(bars):
        y0 = 4 + i * (bar_px + 4)
        img[y0:y0 + bar_px, : max(1, int((width - 1) * ms / longest))] = (40, 40, 40) if name == "candidate" \
            else KIND_COLORS["matmul"]
    return img
