"""The pipeline-file cache (``config/document_cache.py``): a file loaded a second time gives what loading its text
afresh gives, values and the line of each, or is loaded afresh.

The oracle is ``yamlpos.load_text``, the loader itself, run on the same text without the cache.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgewise.config import document_cache, load
from edgewise.config.yamlpos import load_file, load_text
from edgewise.errors import ConfigError
from edgewise.expr import tree_cache
from tests.conftest import ROOT


@pytest.fixture
def cache(load_cache: Path) -> Path:
    return load_cache


def _kept(cache: Path) -> list[Path]:
    return sorted((cache / "documents").glob("*.json")) if (cache / "documents").exists() else []


def _twice(path: Path) -> None:
    """Load ``path`` twice (the second from the cache when it was kept); both equal a fresh load of its text."""
    text = path.read_text(encoding="utf-8")
    fresh = load_text(text, str(path))
    for _ in range(2):
        loaded = load_file(str(path))
        assert loaded.data == fresh.data
        assert _types(loaded.data) == _types(fresh.data)
        assert loaded.positions == fresh.positions
        assert loaded.file == str(path)


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    return type(value).__name__


FILES = sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("conformance/**/*.yaml")])


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_the_repository_files_load_from_the_cache_as_from_their_text(path: Path, cache: Path) -> None:
    _twice(path)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                    st.text(max_size=8), st.dates(), st.binary(max_size=4))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=3)), max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.dictionaries(st.text(min_size=1, max_size=5), documents, min_size=1, max_size=3),
       flow=st.booleans())
def test_generated_files_load_from_the_cache_as_from_their_text(data: dict[str, Any], flow: bool, cache: Path,
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """Values JSON cannot give back exactly (dates, binary, NaN, integers beyond 64 bits) keep the file out of the
    cache; the rest come back equal, of the same types, at the same lines."""
    path = tmp_path_factory.mktemp("doc") / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, default_flow_style=flow, allow_unicode=True), encoding="utf-8")
    _twice(path)
    if _has_nan(data):
        assert not _kept(cache) or all(path.read_text() not in p.read_text() for p in _kept(cache))


def _has_nan(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_nan(v) for v in value)
    return isinstance(value, float) and math.isnan(value)


def test_a_kept_file_is_read_without_the_yaml_loader(cache: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\npipelines:\n  - id: p\n    steps: []\n")
    load_file(str(path))
    assert len(_kept(cache)) == 1

    def no_parsing(text: str, file: str) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr("edgewise.config.yamlpos.load_text", no_parsing)
    assert load_file(str(path)).data["pipelines"][0]["id"] == "p"
    monkeypatch.setenv(tree_cache.SWITCH, "off")
    with pytest.raises(AssertionError, match="parsed again"):
        load_file(str(path))


def test_errors_of_a_kept_file_point_at_the_same_lines(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\npipelines:\n  - id: p\n    steps:\n      - filter: {id: f, where: 'x +'}\n"
                    "      - filter: {id: g, wher: 'x > 1'}\n")
    messages = []
    for _ in range(2):
        with pytest.raises(ConfigError) as info:
            load(str(path))
        messages.append(info.value.render())
    assert len(_kept(cache)) == 1
    assert messages[0] == messages[1]
    assert "p.yaml:5:" in messages[0] and "p.yaml:6:" in messages[0]


def test_the_same_text_under_another_name_is_named_so(cache: Path, tmp_path: Path) -> None:
    text = "version: 1\npipelines:\n  - id: p\n    steps:\n      - filter: {id: f, where: 'x +'}\n"
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(text)
    second.write_text(text)
    with pytest.raises(ConfigError):
        load(str(first))
    with pytest.raises(ConfigError) as info:
        load(str(second))
    assert "b.yaml:5:" in info.value.render() and "a.yaml" not in info.value.render()


KEPT_TEXT = "version: 1\nsources: []\n"


@pytest.mark.parametrize("damage", [b"", b"\xff\xfe", b"[]", b'{"text": 1}', b'{"text": "version: 1\\nsources: []\\n"}',
                                    b'{"text": "version: 1\\nsources: []\\n", "data": {}, "positions": [[1]]}'])
def test_a_damaged_file_is_loaded_again(cache: Path, tmp_path: Path, damage: bytes) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(KEPT_TEXT)
    load_file(str(path))
    (kept,) = _kept(cache)
    kept.write_bytes(damage)
    assert load_file(str(path)).data == {"version": 1, "sources": []}


def test_only_the_most_recent_files_are_kept(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(document_cache, "KEEP", 3)
    for i in range(6):
        path = tmp_path / f"p{i}.yaml"
        path.write_text(f"version: 1\nn: {i}\n")
        load_file(str(path))
        for n, kept in enumerate(sorted(_kept(cache), key=lambda p: p.stat().st_mtime_ns)):
            os.utime(kept, ns=(10**18 + n * 10**9, 10**18 + n * 10**9))  # distinct times, in writing order
    assert sorted(orjson.loads(p.read_bytes())["data"]["n"] for p in _kept(cache)) == [3, 4, 5]


def test_without_a_home_directory_there_is_no_cache_and_loading_works(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """No ``EDGEWISE_CACHE_DIR``, no ``XDG_CACHE_HOME``, no ``HOME`` and no entry in the password database (a
    service account in a container): the caches are not there, and a file loads and loads again."""
    import pwd

    from edgewise import cachedir

    for variable in (cachedir.CACHE, "XDG_CACHE_HOME", "HOME", tree_cache.SWITCH):
        monkeypatch.delenv(variable, raising=False)

    def no_user(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_user)
    assert cachedir.cache_path("documents", "x.json") is None
    path = tmp_path / "pipeline.yaml"
    path.write_text("version: 1\npipelines:\n  - id: p\n    steps:\n      - filter: {id: f, where: 'a = 1'}\n")
    assert load(str(path)).pipelines[0].id == load(str(path)).pipelines[0].id == "p"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the test can tell: with a home, there is a place
    assert cachedir.cache_path("documents", "x.json") == str(tmp_path / "home" / ".cache" / "edgewise" / "documents"
                                                              / "x.json")
