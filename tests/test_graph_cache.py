"""compiler.capture.capture_cached: a captured graph kept on disk (the sim env's reset builds the
1B-shaped model on the meta device and exports it once per problem and compiler version)."""
import os

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.capture import _graph_cache_dir, capture_cached


def _counting(name):
    calls = []

    def build():
        calls.append(1)
        return ZOO[name](device="meta")
    return build, calls


def test_a_cached_graph_is_the_captured_one_and_the_second_call_builds_nothing():
    build, calls = _counting("llama-tiny")
    first = capture_cached("k1", build, "llama-tiny")
    assert first == capture(*ZOO["llama-tiny"](device="meta"), "llama-tiny")
    again = capture_cached("k1", build, "llama-tiny")
    assert again == first and len(calls) == 1
    capture_cached("k2", build, "llama-tiny")           # another key: another entry
    assert len(calls) == 2
    assert len(list(_graph_cache_dir().glob("*.pickle"))) >= 2


def test_a_broken_or_foreign_cache_file_is_captured_again_and_replaced():
    build, calls = _counting("mlp-tiny")
    capture_cached("b", build, "mlp-tiny")
    files = sorted(_graph_cache_dir().glob("*.pickle"), key=os.path.getmtime)
    path = files[-1]
    path.write_bytes(b"not a pickle")
    good = capture_cached("b", build, "mlp-tiny")
    assert len(calls) == 2 and good.name == "mlp-tiny"
    assert capture_cached("b", build, "mlp-tiny") == good and len(calls) == 2   # the file was replaced


def test_an_unwritable_cache_still_captures(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MKGYM_GRAPH_CACHE", str(blocker / "graphs"))     # under a file: cannot be made
    build, calls = _counting("mlp-tiny")
    assert capture_cached("c", build, "mlp-tiny").name == "mlp-tiny"
    assert capture_cached("c", build, "mlp-tiny").name == "mlp-tiny" and len(calls) == 2
