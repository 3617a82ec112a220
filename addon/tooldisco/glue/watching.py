"""Adds the watcher (``tooldisco.watch``) at the chain's end once mitmproxy runs: it annotates
each flow when it ends, after every other addon's hook (the loop's included) ran."""

from __future__ import annotations

from mitmproxy import ctx

from tooldisco.watch.watch import Watcher


class Watching:
    name = "tooldisco_watching"

    def __init__(self, watch: Watcher) -> None:
        self.watch = watch
        self._added = False

    def running(self) -> None:
        if not self._added:
            self._added = True
            ctx.master.addons.add(self.watch)
