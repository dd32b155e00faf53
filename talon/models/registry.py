"""One registry of read-only models for every user of the app."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

from .loaded import LoadedModel, ModelLoadError, Progress
from .loading import load_model

log = logging.getLogger(__name__)
T = TypeVar("T")


class ModelRegistry:
    """Loads each model once and hands out the same read-only object afterwards.

    Thread-safe with one lock per entry: concurrent requests for the same entry wait for one load,
    requests for other entries never wait for it, and ``error`` / ``loaded`` never wait for a load.
    Holds no per-run state, so one registry can serve every user of the app.

    Entries are models by spec (``get``) and anything derived from a model, such as a draft head
    loaded for a target, under a key the caller chooses (``get_derived``; key it by
    ``LoadedModel.cache_key`` at its end, never by a display name, so it goes with its model).

    Args:
        device / dtype: where and how models load (None: this machine's default).
        max_models: at most this many models kept (None: no limit); ``pinned`` specs are never let go."""

    def __init__(
        self,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
        max_models: int | None = None,
        pinned: tuple[str, ...] = (),
    ) -> None:
        self._device, self._dtype = device, dtype
        self._max_models, self._pinned = max_models, set(pinned)
        self._used: dict[str, int] = {}  # model spec -> when last handed out (a counter), for eviction
        self._clock = 0
        self._entries: dict[Hashable, Any] = {}
        self._errors: dict[Hashable, str] = {}
        self._locks: dict[Hashable, threading.Lock] = {}
        self._loading: dict[Hashable, str] = {}  # entries being loaded -> their last progress line
        self._table_lock = threading.Lock()  # guards the three dicts, never held during a load

    def _entry_lock(self, key: Hashable) -> threading.Lock:
        with self._table_lock:
            return self._locks.setdefault(key, threading.Lock())

    def _lookup(self, key: Hashable) -> tuple[bool, Any]:
        with self._table_lock:
            return (key in self._entries, self._entries.get(key))

    def get_derived(self, key: Hashable, load: Callable[[], T]) -> T:
        """The entry under ``key``, made by ``load()`` on first use (a ``ModelLoadError`` is kept for
        ``error(key)`` and raised; the next call tries again)."""
        found, value = self._lookup(key)
        if found:
            return value
        with self._entry_lock(key):
            found, value = self._lookup(key)
            if found:
                return value
            with self._table_lock:
                self._loading.setdefault(key, "loading")
            try:
                value = load()
            except ModelLoadError as err:
                with self._table_lock:
                    self._errors[key] = str(err)
                raise
            finally:
                with self._table_lock:
                    self._loading.pop(key, None)
            with self._table_lock:
                self._entries[key] = value
                self._errors.pop(key, None)
            return value

    def get(self, spec: str, progress: Progress = log.info) -> LoadedModel:
        """The model of ``spec`` (``talon.models.loading.load_model``), loaded once; its progress lines
        go to ``progress`` and to ``loading_status``.  Past ``max_models`` models the least recently
        used one not pinned is let go (``_evict``), before a new one loads: memory holds at most
        ``max_models`` at once, not one more while the new one loads."""
        if self._lookup(spec)[0] is False and self._max_models is not None:
            self._evict(self._max_models - 1)

        def report(line: str) -> None:
            with self._table_lock:
                self._loading[spec] = line
            progress(line)

        model = self.get_derived(
            spec, lambda: load_model(spec, device=self._device, dtype=self._dtype, progress=report)
        )
        with self._table_lock:
            self._clock += 1
            self._used[spec] = self._clock
        self._evict()
        return model

    def _evict(self, keep: int | None = None) -> None:
        """Let go of the least recently used models past ``keep`` (default ``max_models``; never a pinned
        one), with what was derived from each (heads loaded for it, its stock copy): on a shared app
        every target a user names would otherwise stay in memory for the process's life.  A run holding
        one keeps it until the run ends; the next request loads it again."""
        if self._max_models is None:
            return
        keep = self._max_models if keep is None else keep
        with self._table_lock:
            models = [k for k in self._used if isinstance(self._entries.get(k), LoadedModel)]
            spare = sorted((k for k in models if k not in self._pinned), key=self._used.__getitem__)
            for spec in spare[: max(0, len(models) - keep)]:
                model = self._entries.pop(spec)
                self._used.pop(spec, None)
                derived = [
                    k
                    for k in self._entries
                    if k == ("stock", spec) or (isinstance(k, tuple) and k[-3:] == model.cache_key)
                ]
                for k in derived:
                    self._entries.pop(k, None)
                log.info(
                    "let go of %s and %d entries derived from it (over %d models)", spec, len(derived), self._max_models
                )

    def get_stock(self, spec: str, progress: Progress = log.info) -> LoadedModel:
        """The model of ``spec`` exactly as transformers builds it (no packed CPU kernels: what the
        transformers peers run), loaded once, apart from ``get``'s."""
        return self.get_derived(
            ("stock", spec),
            lambda: load_model(spec, device=self._device, dtype=self._dtype, progress=progress, stock=True),
        )

    def loading_status(self, key: Hashable) -> str | None:
        """The last progress line of ``key``'s load while it is in flight (None when it is not loading)."""
        with self._table_lock:
            return self._loading.get(key)

    def error(self, spec: Hashable) -> str | None:
        """The message of the last failed load of ``spec`` (None if it loaded or was never tried)."""
        with self._table_lock:
            return self._errors.get(spec)

    def loaded(self) -> list[str]:
        """Model specs loaded so far."""
        with self._table_lock:
            return [k for k, v in self._entries.items() if isinstance(k, str) and isinstance(v, LoadedModel)]
