"""The engine's side of state: opening the plan's stores, restoring stateful steps, and committing their changes
together with how far each source was read.

Keys in a store: ``step/<step id>/<the step's own key>`` for step state, ``source/<source id>`` for positions (the
number of events of that source already processed), ``digest/<source id>`` (a digest of those events' content: a
restarted run resumes only where its input starts with exactly them) and ``run/<source id>`` (the run id that names
events of inputs without an identity of their own, such as stdin). A commit puts a store's step changes and the
positions in one transaction, so after a crash the state and the input position always agree. When a pipeline's
steps use several stores, each store is committed atomically on its own and the positions go to ``default``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from edgewise.state import StateStore, open_store
from edgewise.state.memory import MemoryStore

if TYPE_CHECKING:
    from edgewise.config.plan import Plan
    from edgewise.steps.stateful import StatefulStep


def step_prefix(step_id: str) -> str:
    return f"step/{step_id}/"


class StateRuntime:
    def __init__(self, plan: Plan, stores: Mapping[str, StateStore] | None = None, *, fresh: bool = False) -> None:
        self.plan = plan
        self.fresh = fresh
        self.steps: list[StatefulStep] = plan.stateful_steps()
        self._given = dict(stores or {})
        self.stores: dict[str, StateStore] = {}

    @property
    def durable(self) -> bool:
        return any(s.durable for s in self.stores.values())

    def open(self) -> tuple[dict[str, int], dict[str, str], dict[str, str]]:
        """Open the stores, give every stateful step its committed state; the committed source positions, run
        ids (``SourceContext.run_id``) and digests of the events the positions cover."""
        self.open_stores()
        if self.fresh:
            self._forget()
        for step in self.steps:
            step.reset()
            step.track_changes(self.stores[step.store_name].durable)
            prefix = step_prefix(step.id)
            step.restore((key[len(prefix):], value) for key, value in self.stores[step.store_name].scan(prefix))
        default = self.stores["default"]
        positions = {key.removeprefix("source/"): int(value) for key, value in default.scan("source/")}
        runs = {key.removeprefix("run/"): value.decode() for key, value in default.scan("run/")}
        digests = {key.removeprefix("digest/"): value.decode() for key, value in default.scan("digest/")}
        return positions, runs, digests

    def open_stores(self) -> None:
        """Open the stores the plan's steps use (``default`` always), without restoring any step."""
        names = {"default"} | set(self.plan.stores) | {s.store_name for s in self.steps}
        for name in sorted(names):
            if name in self._given:
                self.stores[name] = self._given[name]
            elif name in self.plan.stores:
                self.stores[name] = open_store(self.plan.stores[name], self.plan.base_dir)
            else:
                self.stores[name] = MemoryStore()

    def _forget(self) -> None:
        """Delete what earlier runs of this plan committed: its steps' state and the source positions."""
        prefixes = {"default": ["source/", "run/", "digest/"]}
        for step in self.steps:
            prefixes.setdefault(step.store_name, []).append(step_prefix(step.id))
        for name, wanted in prefixes.items():
            store = self.stores[name]
            store.apply({key: None for prefix in wanted for key, _ in store.scan(prefix)})

    def commit(self, positions: Mapping[str, int], runs: Mapping[str, str], digests: Mapping[str, str],
               ended: Iterable[str] = ()) -> None:
        """Commit every step's changes (and the positions) to their stores, one transaction per store. ``ended``:
        sources whose input a run read to its end: their position, run id and digest are removed with this commit,
        so the next run reads its input from the start (a finished run is not a crashed one)."""
        writes = self.step_writes()
        for source_id, n in positions.items():
            writes["default"][f"source/{source_id}"] = str(n).encode()
        for source_id, run_id in runs.items():
            writes["default"][f"run/{source_id}"] = run_id.encode()
        for source_id, digest in digests.items():
            writes["default"][f"digest/{source_id}"] = digest.encode()
        for source_id in ended:
            for kind in ("source", "run", "digest"):
                writes["default"][f"{kind}/{source_id}"] = None
        self.apply(writes)

    def state_keys(self, step: StatefulStep, name: str) -> Iterable[str]:
        """The store keys a step's state entry ``name`` is kept under: one, here; one per partition it belongs to
        where a worker keeps its partitions apart (``partitions.PartitionedState``)."""
        return (step_prefix(step.id) + name,)

    def step_writes(self) -> dict[str, dict[str, bytes | None]]:
        """Every step's changes since the last commit, as writes per store (None: delete)."""
        writes: dict[str, dict[str, bytes | None]] = {name: {} for name in self.stores}
        for step in self.steps:
            target = writes[step.store_name]
            for name, value in step.changes().items():
                for key in self.state_keys(step, name):
                    target[key] = value
        return writes

    def apply(self, writes: Mapping[str, Mapping[str, bytes | None]]) -> None:
        """One transaction per durable store that has writes."""
        for name, batch in writes.items():
            store = self.stores[name]
            if batch and store.durable:
                store.apply(batch)

    def lookup(self, step_id: str, key: str) -> object:
        for step in self.steps:
            if step.id == step_id:
                return step.lookup(key)
        raise KeyError(step_id)

    def close(self) -> None:
        for name, store in self.stores.items():
            if name not in self._given:
                store.close()
        self.stores.clear()
