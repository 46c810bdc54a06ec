"""The results store: every evaluation in an embedded SQLite database, served back as a cache.

WAL mode, one transaction per write, so a judge that dies mid-evaluation loses nothing
already written and readers never block the writer.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from megakernel_gym.cache_paths import user_cache_path
from megakernel_gym.rewards.result import EvalResult

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    problem TEXT NOT NULL,
    problem_sha256 TEXT NOT NULL,
    candidate_sha256 TEXT NOT NULL,
    device TEXT NOT NULL,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,
    speedup REAL,
    result TEXT NOT NULL,
    created REAL NOT NULL,
    judge_version TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS evaluations_key ON evaluations (problem_sha256, candidate_sha256, device);
CREATE TABLE IF NOT EXISTS sources (
    candidate_sha256 TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS baselines (
    problem_sha256 TEXT NOT NULL,
    device TEXT NOT NULL,
    software TEXT NOT NULL,
    result TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (problem_sha256, device, software)
);
CREATE TABLE IF NOT EXISTS peaks (
    problem_sha256 TEXT NOT NULL,
    device TEXT NOT NULL,
    software TEXT NOT NULL,
    peak_bytes INTEGER NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (problem_sha256, device, software)
);
"""

# Results that say something about the candidate are cached; a timeout may be the
# machine's fault, so it is evaluated again next time.
CACHEABLE = {"correct", "incorrect", "compile_error", "runtime_error", "rejected"}
RECORDED = CACHEABLE | {"timeout"}   # kept for the record, though a timeout is not served back


def default_path() -> Path:
    return user_cache_path("MKGYM_STORE", "results.sqlite")


def as_store(store: "ResultsStore | str | Path | None | bool") -> "ResultsStore | None":
    """What judges and pools accept as `store`: a ResultsStore, a path, None (the default path:
    MKGYM_STORE or the user cache) or False (no store)."""
    if store is False:
        return None
    return store if isinstance(store, ResultsStore) else ResultsStore(store)


class StoreError(ValueError):
    """A results store that cannot be opened: the message names the file and the fix."""


class ResultsStore:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False,
                                         isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
            cols = {r[1] for r in self._conn.execute("PRAGMA table_info(evaluations)")}
            if "judge_version" not in cols:     # a store written before judges had an identity: its rows have none
                self._conn.execute("ALTER TABLE evaluations ADD COLUMN judge_version TEXT NOT NULL DEFAULT ''")
        except sqlite3.DatabaseError as e:
            # (red team 17: --store naming a file that is not a database printed a traceback, no JSON)
            raise StoreError(f"{self.path}: not a results database ({e}); name a new file or one mkgym wrote "
                             "(--store, MKGYM_STORE)") from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def put(self, result: EvalResult, device: str, source: str | None = None) -> None:
        """One evaluation; with `source`, the candidate's code too (kept once per hash: what export ships;
        not a text no UTF-8 can hold, one with a lone surrogate, which SQLite would refuse)."""
        from megakernel_gym.rewards.problem import lone_surrogate
        if source is not None and lone_surrogate(source) is not None:
            source = None
        row = (result.problem, result.problem_sha256, result.candidate_sha256, device, result.backend,
               result.status, result.speedup, result.to_json(), time.time(), result.judge_version)
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                self._conn.execute("INSERT INTO evaluations (problem, problem_sha256, candidate_sha256, device, "
                                   "backend, status, speedup, result, created, judge_version) "
                                   "VALUES (?,?,?,?,?,?,?,?,?,?)", row)
                if source is not None:
                    self._conn.execute("INSERT OR IGNORE INTO sources VALUES (?,?,?)",
                                       (result.candidate_sha256, source, time.time()))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def record(self, result: EvalResult, device: str, source: str | None = None) -> bool:
        """put() a result a judge just made, unless it came from this store's cache or is not
        one to keep. True when it was written."""
        if result.cached or result.status not in RECORDED:
            return False
        self.put(result, device, source=source)
        return True

    def best(self, backend: str | None = None, judge_version: str | None = None) -> list[tuple[EvalResult, str]]:
        """Per problem (its file's hash: two problems of one name, a built-in and a user's file of the same
        stem, or one under two tolerance presets, are two problems), the best correct result whose source is
        kept, with that source: the fastest measured speedup (a result without one, as on the cpu backend,
        ranks below any measured). A candidate ever judged incorrect or rejected on that problem is left out,
        whatever its other verdicts (red team 8: export shipped, under the built-in softmax's name and
        level, a copy kernel judged incorrect there and correct on a user's softmax.py). With `judge_version`, only
        that judge's correct verdicts count (red team 20: an older judge's, through a hole since closed, were
        shipped); an incorrect or rejected verdict by any judge still leaves the candidate out."""
        q = ("SELECT e.problem, e.result, s.source FROM evaluations e JOIN sources s "
             "ON e.candidate_sha256 = s.candidate_sha256 WHERE e.status = 'correct' AND NOT EXISTS ("
             "SELECT 1 FROM evaluations f WHERE f.problem_sha256 = e.problem_sha256 "
             "AND f.candidate_sha256 = e.candidate_sha256 AND f.status IN ('incorrect', 'rejected'))")
        args: tuple = ()
        if backend:
            q += " AND e.backend = ?"
            args = (backend,)
        if judge_version is not None:
            q += " AND e.judge_version = ?"
            args = (*args, judge_version)
        q += " ORDER BY e.problem_sha256, COALESCE(e.speedup, -1) DESC, e.id DESC"
        with self._lock:
            rows = self._conn.execute(q, args).fetchall()
        out, seen = [], set()
        for _problem, result, source in rows:
            res = EvalResult.from_dict(json.loads(result))
            if res.problem_sha256 not in seen:
                seen.add(res.problem_sha256)
                out.append((res, source))
        return sorted(out, key=lambda rs: (rs[0].problem, rs[0].problem_sha256))

    def get(self, problem_sha256: str, candidate_sha256: str, device: str, judge_version: str) -> EvalResult | None:
        """The latest cacheable verdict on this kernel for this problem on this device by this judge
        (rewards/version.py: another judge's, older or built with test-only settings, is never served)."""
        with self._lock:
            cur = self._conn.execute(
                "SELECT result FROM evaluations WHERE problem_sha256=? AND candidate_sha256=? AND device=? "
                "AND judge_version=? AND status IN (%s) ORDER BY id DESC LIMIT 1" % ",".join("?" * len(CACHEABLE)),
                (problem_sha256, candidate_sha256, device, judge_version, *sorted(CACHEABLE)))
            row = cur.fetchone()
        if row is None:
            return None
        res = EvalResult.from_dict(json.loads(row[0]))
        res.cached = True
        return res

    def count(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]

    def history(self, problem: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        q = "SELECT problem, candidate_sha256, device, status, speedup, created FROM evaluations"
        args: tuple = ()
        if problem:
            q += " WHERE problem=?"
            args = (problem,)
        q += " ORDER BY id DESC LIMIT ?"
        with self._lock:
            rows = self._conn.execute(q, (*args, limit)).fetchall()
        keys = ("problem", "candidate_sha256", "device", "status", "speedup", "created")
        return [dict(zip(keys, r)) for r in rows]

    def put_baselines(self, problem_sha256: str, device: str, software: str, baselines: dict) -> None:
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO baselines VALUES (?,?,?,?,?)",
                               (problem_sha256, device, software, json.dumps(baselines), time.time()))

    def put_peak(self, problem_sha256: str, device: str, software: str, peak_bytes: int) -> None:
        """A problem's measured GPU memory peak (the reference worker's, with its baselines): what
        admission learns its need from (rewards/admission.py), kept for the pools after this one."""
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO peaks VALUES (?,?,?,?,?)",
                               (problem_sha256, device, software, int(peak_bytes), time.time()))

    def get_peak(self, problem_sha256: str, device: str, software: str) -> int | None:
        with self._lock:
            row = self._conn.execute("SELECT peak_bytes FROM peaks WHERE problem_sha256=? AND device=? AND software=?",
                                     (problem_sha256, device, software)).fetchone()
        return int(row[0]) if row else None

    def get_baselines(self, problem_sha256: str, device: str, software: str) -> dict | None:
        with self._lock:
            row = self._conn.execute("SELECT result FROM baselines WHERE problem_sha256=? AND device=? AND software=?",
                                     (problem_sha256, device, software)).fetchone()
        return json.loads(row[0]) if row else None
