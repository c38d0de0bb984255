"""How the ranks of conform-model --distributed hand their results to the one that writes the report.

Through the c10d store of the rendezvous (torch.distributed.rendezvous("env://")): under torchrun
that is the TCPStore its agent already hosts at MASTER_ADDR:MASTER_PORT, the one every rank of every
node reaches, so the same command works across nodes and no shared folder is needed. The store is
not the process group: it is joined before any group exists (the single-device run happens before
init_process_group) and still answers when a collective has timed out or a rank has died.

A rank that dies leaves its keys unwritten, and the report says "did not report". Under torchrun a
rank that dies makes the agent send SIGTERM to every other rank; the survivors must then write the
report within the agent's grace period, even while their main thread waits inside a collective or a
CUDA synchronisation, where a Python signal handler would never run. So SIGTERM is blocked in every
thread and taken by a thread of its own with sigwait (`on_termination`).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Callable, Optional

POLL_SECONDS = 0.2


class Exchange:
    def __init__(self, store, rank: int, world: int):
        self.store, self.rank, self.world = store, rank, world
        # Keys of this attempt only: a torchrun restart reuses the agent's store.
        self.prefix = f"gemma4-conform/attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self.claimed_here = threading.Event()   # this process won claim_report()
        self.report_written = threading.Event()
        self.running: Optional[str] = None      # the check this rank is running (for the report after SIGTERM)

    @classmethod
    def join(cls, rank: int, world: int, timeout: float) -> "Exchange":
        import torch.distributed as dist

        store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world, timeout=timedelta(seconds=timeout)))
        return cls(store, rank, world)

    def _key(self, check: str, rank: int) -> str:
        return f"{self.prefix}{check}/rank{rank}"

    def post(self, check: str, payload: dict) -> None:
        """This rank's result of `check` (rows, seconds, whether it raised), as one JSON value."""
        self.store.set(self._key(check, self.rank), json.dumps(payload))

    def posted(self, check: str) -> dict:
        """rank -> payload, for the ranks whose result of `check` is in the store now."""
        out = {}
        for r in range(self.world):
            key = self._key(check, r)
            try:
                if self.store.check([key]):
                    out[r] = json.loads(self.store.get(key))
            except Exception:  # the store's host is gone (its process died): nothing more to read
                break
        return out

    def wait(self, check: str, timeout: float) -> dict:
        """`posted(check)` once every rank has posted, or when `timeout` seconds have passed."""
        deadline = time.monotonic() + timeout
        got = self.posted(check)
        while len(got) < self.world and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            got = self.posted(check)
        return got

    def claim_report(self) -> bool:
        """True for exactly one process of the run: the one that writes the report (rank 0 when the
        run ends normally; else the first rank stopped by the launcher)."""
        try:
            won = self.store.add(f"{self.prefix}report", 1) == 1
        except Exception:  # no store left: this process writes what it knows
            won = True
        if won:
            self.claimed_here.set()
        return won


def on_termination(exchange: Exchange, write_report: Callable[[str], None], grace: float = 20.0) -> None:
    """From now on SIGTERM ends this process with exit 1 after `write_report(reason)` has run here,
    if this process claims the report. Call it before any thread starts: threads inherit the mask,
    and a thread that does not block SIGTERM would take it with the default action (exit)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait() -> None:
        signal.sigwait({signal.SIGTERM})
        try:
            if exchange.claimed_here.is_set():  # the main thread is writing it: let it finish
                exchange.report_written.wait(grace)
            elif exchange.claim_report():
                write_report(f"rank {exchange.rank} was stopped by SIGTERM (the launcher stops every rank once "
                             f"one fails, or when it is stopped itself)")
        except BaseException as e:  # noqa: BLE001 - nothing may keep the process from exiting
            print(f"rank {exchange.rank}: writing the report after SIGTERM failed: {e}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    threading.Thread(target=wait, name="gemma4-conform-sigterm", daemon=True).start()

