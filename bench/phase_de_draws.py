"""Where Phase D/E's orchestrator-only result comes from: the kernel's loop, one student trained
on orchestrator tasks only (``bench/phase_de.py``'s settings, seeds 0-2), with the epoch's training
tasks and episode seeds drawn three ways: (a) the campaign's ``sample_tasks`` and job seeds (what
``bench/phase_de.py`` runs); (b) the task draws of the benchmark's old copied loop
(``random.Random(f"phase_de:{seed}:orchestrator").sample(train, 6)`` per epoch); (c) those draws and
the old loop's episode seeds (``10000 * epoch + position``). Prints orchestrator held-out success per
seed (the same evaluation as ``bench/phase_de.py``). A diagnostic, not a product path: it gives
the kernel's ``collect_epoch`` another task sampler (``sample=``)."""

import asyncio
import json
import random
import statistics

import msgspec
import torch

from aios_rl.local import LocalPolicy, collect_epoch, train_epoch
from aios_rl.student import load_student, new_student
from bench import phase_de as P
from bench._kernel import taught


async def one(splits, s, seed, variant):
    torch.manual_seed(seed)
    weights = new_student("tiny", seed=seed).to_bytes()
    model = load_student(weights)
    spec = P.student_spec("orchestrator-only", {"orchestrator": 1.0}, seed, s)
    train = splits.train["orchestrator"]
    available = {"orchestrator": [t.task_id for t in train]}
    by_id = {t.task_id: t for t in train}
    draw = random.Random(f"phase_de:{seed}:orchestrator")
    epoch_now = {"e": 0}

    def old_sample(spec_, epoch, available_):
        picks = draw.sample(train, min(s.tasks_per_epoch, len(train)))
        return [f"orchestrator/{t.task_id}" for t in picks]

    sample = old_sample if variant in ("old-draw", "old-draw+seeds") else None
    policy = LocalPolicy(model)
    async with splits.rollouts_for(policy) as rollouts:

        async def run(jobs):
            if variant == "old-draw+seeds":
                jobs = [
                    msgspec.structs.replace(j, seed=10_000 * epoch_now["e"] + p)
                    for p, j in enumerate(jobs)
                ]
            return await rollouts.run(jobs)

        for epoch in range(s.epochs):
            epoch_now["e"] = epoch
            got = await collect_epoch(
                spec, epoch, available, run, candidate=policy.active, sample=sample
            )
            train_epoch(
                model, got.kept, spec.trainer, teach=lambda ep: taught(ep, by_id[ep.task_id])
            )
        success = (await P.evaluate(rollouts, splits, "orchestrator-only-"))["success"][
            "orchestrator"
        ]
    return statistics.fmean(success)


async def main():
    s = P.FULL
    out = {}
    async with P.environments(s, lambda m: None) as splits:
        for variant in ("kernel", "old-draw", "old-draw+seeds"):
            for seed in (0, 1, 2):
                v = await one(splits, s, seed, variant)
                out.setdefault(variant, []).append(v)
                print(variant, seed, f"{v * 100:.1f}", flush=True)
    print(json.dumps(out))


asyncio.run(main())
