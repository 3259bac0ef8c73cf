"""``make mutate`` plants each of its bugs by replacing a text that must occur exactly once in its file: a change
to that code must bring the mutation along (a rewrite of ``dedupe`` once left its mutation pointing at nothing)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("edgewise_tools_mutate", ROOT / "tools" / "mutate.py")
assert spec is not None and spec.loader is not None
mutate = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mutate  # its dataclasses look their module up by name
spec.loader.exec_module(mutate)


@pytest.mark.parametrize("mutation", mutate.MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_finds_its_text_once(mutation) -> None:
    text = (ROOT / mutation.path).read_text(encoding="utf-8")
    assert text.count(mutation.old) == 1, f"{mutation.path} holds {mutation.old!r} {text.count(mutation.old)} times"
    for test in mutation.tests:
        assert (ROOT / test.split("::")[0]).exists(), test
