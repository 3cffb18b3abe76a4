"""A separate OS process that advances the checkpoint pointers, for the concurrency test.

``python -m tests.checkpoint_worker URL NAMESPACE WORKER N``: connects, stores N checkpoints of
its own, prints ``ready``, waits for a line on stdin (so all workers start advancing together),
advances to each of its checkpoints in turn, and prints one JSON line:
``{"applied": [ids whose advance moved the pointers], "failed": ["error", ...]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aios_rl.bus import configure_logging, connect
from aios_rl.state.checkpoints import CheckpointRegistry, RegistryError
from contracts import Names


async def main(url: str, namespace: str, worker: int, n: int) -> None:
    configure_logging(f"advance-worker-{worker}", level="warning")  # stdout is the protocol
    async with connect(url, name=f"advance-worker-{worker}", names=Names(namespace)) as bus:
        registry = CheckpointRegistry(bus)
        ids = []
        for i in range(n):
            meta = await registry.store(
                f"worker {worker} weights {i}".encode(),
                parent_id=None,
                created_by=f"w{worker}-u{i}",
                algorithm="grpo",
            )
            ids.append(meta.checkpoint_id)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        applied, failed = [], []
        for cid in ids:
            try:
                moved = await registry.advance(cid, f"worker {worker}")
            except RegistryError as exc:
                failed.append(repr(exc))
                continue
            if moved.moves:
                applied.append(cid)
        print(json.dumps({"applied": applied, "failed": failed}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
