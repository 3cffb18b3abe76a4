"""The student: losses against hand-computed values, the tiny backend, and the learning proof."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import random
import statistics

import msgspec
import pytest
import torch

from aios_rl.student import Decision, Regime, StudentError, load_student, new_student
from aios_rl.student.losses import (
    aggregate,
    clipped_surrogate,
    clipped_value_loss,
    gae,
    group_advantages,
    kl_penalty,
)
from aios_rl.student.tiny import (
    TinyConfig,
    TinyStudent,
    kind_counts,
    named_value,
    page_context,
    pair_features,
    sample_index,
)
from aios_rl.student.train import (
    OptimizerMemory,
    UpdateConfig,
    build_batch,
    recipe_for,
    reward_signal,
    train_step,
    update,
    update_config,
)
from contracts import (
    EnvironmentRecipe,
    Episode,
    TeacherHint,
    TeacherSignal,
    TrainerSettings,
    TrajectoryStep,
)

from .toytask import ToyTask

torch.set_num_threads(1)


# -- losses, by hand ----------------------------------------------------------------------------------


def test_group_advantages_by_hand() -> None:
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 2.0])
    groups = ["a", "a", "a", "a", "b", "b", "c"]
    adv = group_advantages(r, groups, std_normalize=True)
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    assert adv[:4].tolist() == pytest.approx(
        [0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std], rel=1e-5
    )
    assert adv[4:].tolist() == [0.0, 0.0, 0.0]  # equal rewards and a lone episode carry no signal
    dr = group_advantages(r, groups, std_normalize=False)
    assert dr[:4].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])


def test_clipped_surrogate_by_hand() -> None:
    logp_old = torch.zeros(3, 1)
    logp = torch.log(torch.tensor([[1.5], [0.5], [1.1]]))
    adv = torch.tensor([[1.0], [-1.0], [2.0]])
    loss, clipped = clipped_surrogate(logp, logp_old, adv, clip_low=0.2, clip_high=0.28)
    # ratio 1.5, A=1 -> clipped at 1.28; ratio 0.5, A=-1 -> min(-0.5, -0.8) = -0.8; ratio 1.1, A=2 -> 2.2
    assert loss.squeeze().tolist() == pytest.approx([-1.28, 0.8, -2.2], rel=1e-5)
    assert clipped.squeeze().tolist() == [True, True, False]


def test_kl_estimators_by_hand() -> None:
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(math.log(2))
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(0.5 - 1 + math.log(2))
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "k9")  # type: ignore[arg-type]


def test_gae_and_value_loss_by_hand() -> None:
    adv, ret = gae(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.6]), gamma=1.0, lam=1.0)
    assert adv.tolist() == pytest.approx([0.5, 0.4])
    assert ret.tolist() == pytest.approx([1.0, 1.0])
    adv, _ = gae(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.6]), gamma=0.9, lam=0.5)
    d1 = 1.0 - 0.6
    d0 = 0.0 + 0.9 * 0.6 - 0.5
    assert adv.tolist() == pytest.approx([d0 + 0.9 * 0.5 * d1, d1])
    vl = clipped_value_loss(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([1.0]), clip=0.2)
    assert vl.item() == pytest.approx(0.5 * 0.3**2)


def test_aggregation_token_versus_action() -> None:
    per_token = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    assert aggregate(per_token, mask, "token").item() == pytest.approx(7 / 4)
    assert aggregate(per_token, mask, "action").item() == pytest.approx((1 + 4) / 2)


# -- the tiny backend ---------------------------------------------------------------------------------


def test_act_is_seeded_and_reports_logprob_entropy_hidden() -> None:
    m = new_student(seed=3)
    d = [Decision("obs", ("a", "b", "c"), seed=11), Decision("other obs", ("x", "y"), seed=12)]
    first, second = m.act(d, Regime(), want_hidden=True), m.act(d, Regime(), want_hidden=True)
    assert [o.action for o in first] == [o.action for o in second]
    assert all(len(o.hidden) == 8 for o in first)
    assert all(o.logprob <= 0 and 0 <= o.entropy <= math.log(3) + 1e-6 for o in first)
    ev = m.evaluate(d, [first[0].action_index, first[1].action])
    assert ev.logprobs[0, 0].item() == pytest.approx(first[0].logprob, abs=1e-5)


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = torch.tensor([3.0, 0.0, -1.0, -2.0])
    draws = {
        sample_index(logits, Regime(top_p=0.5), torch.Generator().manual_seed(i)) for i in range(50)
    }
    assert draws == {0}
    draws = {
        sample_index(logits, Regime(temperature=5.0), torch.Generator().manual_seed(i))
        for i in range(200)
    }
    assert draws == {0, 1, 2, 3}
    with pytest.raises(StudentError):
        Regime(temperature=0)


@pytest.mark.parametrize("temperature", [1e-45, 1e-30, 5e-324])
def test_a_vanishing_temperature_is_greedy_never_nan(temperature: float) -> None:
    """Logits divided by 1e-45 overflowed to inf and softmax made NaN of them: torch refused to
    sample and a whole sampler batch failed. The limit of a vanishing temperature is greedy."""
    logits = torch.tensor([0.3, 2.0, 1.9999, float("-inf")])
    regime = Regime(temperature=temperature)
    draws = {sample_index(logits, regime, torch.Generator().manual_seed(i)) for i in range(20)}
    assert draws == {1}
    m = new_student(seed=3)
    d = [Decision("obs", ("a", "b", "c"), seed=11), Decision("other obs", ("x", "y"), seed=12)]
    greedy = [
        int(row[: len(x.candidates)].argmax()) for row, x in zip(m.forward(d)[0], d, strict=True)
    ]
    out = m.act(d, regime)
    assert [o.action_index for o in out] == greedy
    assert all(math.isfinite(o.logprob) and math.isfinite(o.entropy) for o in out)


def test_logits_that_are_not_finite_are_a_student_error() -> None:
    with pytest.raises(StudentError, match="not finite"):
        sample_index(torch.tensor([0.1, float("nan")]), Regime(), None)


def test_bytes_round_trip_and_errors() -> None:
    m = new_student(seed=5)
    again = load_student(m.to_bytes())
    d = [Decision("o", ("a", "b"), seed=1)]
    assert again.act(d, Regime())[0].logprob == m.act(d, Regime())[0].logprob
    assert (
        hashlib.sha256(new_student(seed=5).to_bytes()).digest()
        == hashlib.sha256(m.to_bytes()).digest()
    )
    with pytest.raises(StudentError, match="do not load"):
        load_student(b"not a checkpoint")
    with pytest.raises(StudentError, match="offers none"):
        m.act([Decision("free text please")], Regime())
    with pytest.raises(StudentError, match="not among"):
        m.evaluate(d, ["zzz"])


def test_pair_features_say_how_much_of_a_candidate_the_task_names() -> None:
    task = 'Task: Click on the "Ok" button.'
    named, other = 'click [3]  # button "ok"', 'click [4]  # button "Cancel"'
    assert pair_features(task, named) == pytest.approx((1.0, math.log(4), 1.0, 1.0, 0.0))
    assert pair_features(task, other) == pytest.approx((2 / 3, math.log(3), 0.0, 0.0, 0.0))
    # Element numbers never match the task's digits; no quoted value: the last two are 0.
    assert pair_features("Task: pick 3", "click [3]") == (0.0, 0.0, 0.0, 0.0, 0.0)
    fill = 'fill [2] "alice"  # textbox "Nickname"'
    assert pair_features('Task: Enter "alice".', fill)[2:] == (1.0, 0.0, 0.0)
    # A value bound to the field its label names: the nearer the task puts them, the higher.
    task = 'Task: Sign in with username "alice" and password "secret".'
    user = pair_features(task, 'fill [1] "alice"  # textbox "Username"')[4]
    pw = pair_features(task, 'fill [2] "alice"  # textbox "Password"')[4]
    assert user == 1.0 and pw == 0.5  # one word ("and") between "alice" and "password"
    assert pair_features(task, 'fill [2] "secret"  # textbox "Password"')[4] == 1.0


def test_named_value_reads_the_name_the_task_puts_before_a_quoted_value() -> None:
    task = (
        'Task: Apply as "Leslie Dijkstra" (email address "leslie.dijkstra@post.example.io", '
        'city "Belfast", postcode "YT5 5ND").'
    )
    assert named_value(task, 'fill [2] "leslie.dijkstra@post.example.io"  # textbox "Email"') == 1
    # The name after the value is the next field's, and a value inside another is not it:
    # the symmetric nearness of pair_features scores both as bound.
    assert named_value(task, 'fill [6] "Belfast"  # textbox "Postcode"') == 0.0
    assert pair_features(task, 'fill [6] "Belfast"  # textbox "Postcode"')[4] == 1.0
    assert named_value(task, 'fill [2] "Leslie Dijkstra"  # textbox "Email address"') == 0.0
    assert named_value(task, 'fill [5] "Belfast"  # textbox "City"') == 1.0
    assert named_value(task, 'fill [5] "YT5 5ND"  # textbox "Post code"') == 0.0  # not a word
    assert named_value(task, 'fill [1] "Leslie Dijkstra"  # textbox "Applicant name"') == 0.0
    assert named_value(task, 'fill [1] "Leslie"  # textbox "Name"') == 0.0  # not quoted whole
    assert named_value(task, 'click [4]  # checkbox "Belfast"') == 0.0  # no value typed
    sign_in = 'Task: sign in as "dennis50" with password "falcon-82".'
    assert named_value(sign_in, 'fill [4] "falcon-82"  # textbox "Password"') == 1.0
    assert named_value(sign_in, 'fill [4] "dennis50"  # textbox "Password"') == 0.0


def test_named_values_add_a_silent_feature_and_checkpoints_keep_it() -> None:
    d = [
        Decision('Task: city "Oslo"\nURL: x', ('fill [1] "Oslo"  # textbox "City"', "press Enter"))
    ]
    plain, named = TinyStudent(TinyConfig(seed=3)), new_student("tiny", seed=3, named_values=True)
    assert torch.equal(plain.forward(d)[0], named.forward(d)[0])  # untrained: the same policy
    again = load_student(named.to_bytes())
    assert isinstance(again, TinyStudent) and again.config.named_values
    assert load_student(plain.to_bytes()).config.named_values is False
    with pytest.raises(StudentError, match="bad tiny student setting"):
        new_student("tiny", named_vlaues=True)


def test_page_context_tells_the_kind_of_action_and_whether_the_page_shows_what_the_task_names():
    task = 'Task: Open the podcast episode "Episode 33: Consensus".'
    away = ['click [1]  # link "Episode 12: Shells"', 'fill [2] "Episode 33: Consensus"  # '
            'textbox "Search"', 'select [3] "Newest"  # combobox "Sort"', "scroll down",
            "scroll up", "press Enter", "go back", "hover [4]"]  # fmt: skip
    rows = page_context(task, away)
    assert [r[:7].index(1.0) if 1.0 in r[:7] else None for r in rows] == [0, 1, 2, 3, 4, 5, 6, None]
    # A fill with the task's value is not the page showing the named thing: only clicks count.
    assert {r[7] for r in rows} == {0.0}
    here = [*away, 'click [5]  # link "episode 33: consensus"']
    assert {r[7] for r in page_context(task, here)} == {1.0}
    assert page_context(task, []) == []


def test_kind_balance_spreads_an_untrained_policy_over_kinds_of_action_not_candidates() -> None:
    fills = [f'fill [{i}] "v{j}"  # textbox "f{i}"' for i in range(6) for j in range(5)]
    cands = (*fills, 'click [9]  # button "Next"', "scroll down", "press Enter")
    assert kind_counts(cands) == [30] * 30 + [1, 1, 1]
    assert kind_counts(["ls", "cat x", "scroll down"]) == [2, 2, 1]  # the rest: one kind
    d = [Decision('Task: "v1"\nURL: x', cands)]
    plain = new_student("tiny", seed=3)
    balanced = new_student("tiny", seed=3, kind_balance=True)
    shift = balanced.forward(d)[0][0] - plain.forward(d)[0][0]
    assert torch.allclose(shift, -torch.log(torch.tensor(kind_counts(cands), dtype=torch.float32)))
    typing = balanced.forward(d)[0][0].softmax(-1)[:30].sum()
    assert typing < 0.5 < plain.forward(d)[0][0].softmax(-1)[:30].sum()
    again = load_student(balanced.to_bytes())
    assert isinstance(again, TinyStudent) and again.config.kind_balance
    assert torch.equal(again.forward(d)[0], balanced.forward(d)[0])


def test_page_context_starts_silent_and_checkpoints_keep_it() -> None:
    d = [Decision('Task: Open "b"\nURL: x', ('click [1]  # link "a"', "scroll down"))]
    plain, paged = TinyStudent(TinyConfig(seed=3)), new_student("tiny", seed=3, page_context=True)
    assert torch.equal(plain.forward(d)[0], paged.forward(d)[0])  # untrained: the same policy
    again = load_student(paged.to_bytes())
    assert isinstance(again, TinyStudent) and again.config.page_context
    assert load_student(plain.to_bytes()).config.page_context is False


def test_pair_features_start_silent_and_old_checkpoints_load_without_them() -> None:
    d = [
        Decision('Task: Click "b".\nURL: x', ('click [1]  # button "a"', 'click [2]  # button "b"'))
    ]
    with_, without = (
        TinyStudent(TinyConfig(seed=3)),
        TinyStudent(TinyConfig(seed=3, pair_features=False)),
    )
    assert torch.equal(with_.forward(d)[0], without.forward(d)[0])  # untrained: the same policy
    old = torch.load(io.BytesIO(without.to_bytes()), weights_only=True)
    del old["config"]["pair_features"]  # a checkpoint from before the setting
    buf = io.BytesIO()
    torch.save(old, buf)
    loaded = load_student(buf.getvalue())
    assert isinstance(loaded, TinyStudent) and loaded.pair_scorer is None


def _click_named(rng: random.Random, words: list[str]) -> tuple[Decision, int]:
    names = rng.sample(words, 4)
    target = rng.randrange(4)
    obs = f'Task: Click on the "{names[target]}" button.\nURL: miniwob/click-button'
    obs += "".join(f'\n[{i}] button "{n}"' for i, n in enumerate(names))
    cands = tuple(f'click [{i}]  # button "{n}"' for i, n in enumerate(names))
    return Decision(obs, cands), target


@pytest.mark.parametrize("pair", [True, False])
def test_pair_features_carry_a_rule_to_words_never_seen_in_training(pair: bool) -> None:
    # "Click the button the task names", trained on one vocabulary, tried on another: bags of
    # n-grams learn which words were right; the relational features learn the rule.
    rng = random.Random(0)
    train_words = [f"alpha{i}" for i in range(12)]
    test_words = [f"zeta{i}x" for i in range(12)]
    model = TinyStudent(TinyConfig(seed=0, pair_features=pair))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        batch = [_click_named(rng, train_words) for _ in range(16)]
        ev = model.evaluate([d for d, _ in batch], [t for _, t in batch])
        opt.zero_grad()
        (-ev.logprobs.mean()).backward()
        opt.step()
    held = [_click_named(rng, test_words) for _ in range(200)]
    logits = model.forward([d for d, _ in held])[0]
    right = sum(int(logits[i].argmax()) == t for i, (_, t) in enumerate(held)) / len(held)
    if pair:
        assert right >= 0.9, right
    else:
        assert right <= 0.5, right  # chance is 0.25


# -- the trainer code path ----------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_learns_the_toy_task_from_chance_to_ninety_percent(algorithm: str) -> None:
    task = ToyTask(seed=0)
    model = new_student(seed=0)
    config = UpdateConfig(
        algorithm=algorithm, learning_rate=3e-3, update_epochs=2, minibatch_size=64, seed=0
    )  # type: ignore[arg-type]
    before = task.success_rate(model)
    assert before < 0.45
    history = []
    for i in range(60):
        episodes = task.rollouts(model, groups=16, group_size=4, tag=str(i))
        update(model, None, build_batch(episodes, config=config), config)
        history.append(task.success_rate(model, n=100))
        if history[-1] >= 0.9 and len(history) >= 2 and history[-2] >= 0.9:
            break
    assert task.success_rate(model, n=400) >= 0.9, history


def test_same_seed_and_data_give_bit_identical_weights() -> None:
    episodes = ToyTask(seed=1).rollouts(new_student(seed=1), groups=8, group_size=4)
    config = UpdateConfig(seed=7, update_epochs=2, minibatch_size=8)
    digests = set()
    for _ in range(2):
        model = new_student(seed=1)
        update(model, new_student(seed=1), build_batch(episodes, config=config), config)
        digests.add(hashlib.sha256(model.to_bytes()).hexdigest())
    assert len(digests) == 1
    other = new_student(seed=1)
    update(
        other,
        None,
        build_batch(episodes, config=config),
        UpdateConfig(seed=8, update_epochs=2, minibatch_size=8),
    )
    assert hashlib.sha256(other.to_bytes()).hexdigest() not in digests


def _moved(model: TinyStudent, before: list[torch.Tensor]) -> float:
    return math.sqrt(
        sum(float(((p - b) ** 2).sum()) for p, b in zip(model.parameters(), before, strict=True))
    )


def test_a_warm_optimizer_steps_in_proportion_to_the_signal() -> None:
    model = new_student(seed=2)
    episodes = ToyTask(seed=2).rollouts(model, groups=8, group_size=4)
    config = UpdateConfig(seed=0, update_epochs=2, minibatch_size=16)
    strong = build_batch(episodes, config=config)
    assert any(s.advantage for s in strong.policy)
    # The same decisions with a thousandth of the credit: an update with almost nothing to
    # learn from (tied groups but for a few cents of step-level credit).
    weak = dataclasses.replace(
        strong,
        policy=[dataclasses.replace(s, advantage=s.advantage * 1e-3) for s in strong.policy],
    )
    memory = OptimizerMemory()
    first = update(model, None, strong, config, memory=memory)
    assert first["optimizer_warm"] == 0.0 and memory.state is not None
    start = model.to_bytes()
    fresh_model = load_student(start)
    before = [p.detach().clone() for p in model.parameters()]
    warm = update(model, None, weak, config, memory=memory)
    assert warm["optimizer_warm"] == 1.0 and memory.reused == 1
    update(fresh_model, None, weak, config)
    moved_warm, moved_fresh = _moved(model, before), _moved(fresh_model, before)
    # A fresh Adam steps about the learning rate whatever the gradient's size: the weak update
    # moves the weights about as far as the strong one did. Warm moments scale it down.
    assert moved_fresh > 0 and moved_warm < 0.1 * moved_fresh, (moved_warm, moved_fresh)
    # Weights the moments do not belong to (a rollback): a fresh Adam again.
    rolled_back = load_student(start)
    assert update(rolled_back, None, weak, config, memory=memory)["optimizer_warm"] == 0.0


def _episode(obs: str, cands: list[str], chosen: int, reward: float, **kw) -> Episode:
    step = TrajectoryStep(
        index=0,
        observation=obs,
        candidates=cands,
        action=cands[chosen],
        action_index=chosen,
        logprob=math.log(1 / len(cands)),
    )
    return Episode(
        episode_id=f"e-{obs}-{chosen}-{reward}",
        environment="shell",
        task_id=obs,
        trajectory=[step],
        env_reward=reward,
        reward=reward,
        **kw,
    )


def _two_step_episode(reward: float, progress: tuple[float, float], group: str) -> Episode:
    cands = ["edit a", "edit b", "submit"]
    steps = [
        TrajectoryStep(
            index=i,
            observation=f"state {i}",
            candidates=cands,
            action=cands[a],
            action_index=a,
            logprob=math.log(1 / 3),
            progress=p,
        )
        for i, (a, p) in enumerate(zip((0, 2), progress, strict=True))
    ]
    return Episode(
        episode_id=f"e-{group}-{reward}-{progress}", environment="shell", task_id="t",
        group_id=group, trajectory=steps, env_reward=reward, reward=reward,
    )  # fmt: skip


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_progress_credits_each_step_only_when_asked(algorithm: str) -> None:
    episodes = [_two_step_episode(1.0, (1.0, 0.0), "g"), _two_step_episode(0.0, (-0.5, 0.0), "g")]
    plain = build_batch(episodes, config=UpdateConfig(algorithm=algorithm))
    credited = build_batch(episodes, config=UpdateConfig(algorithm=algorithm, progress_coef=0.5))
    flat = [s.advantage for s in plain.policy]
    if algorithm == "grpo":
        # Every step of an episode shares its credit; progress adds 0.5 x each step's own.
        assert flat[0] == flat[1] and flat[2] == flat[3]
        assert [s.advantage - a for s, a in zip(credited.policy, flat, strict=True)] == (
            pytest.approx([0.5, 0.0, -0.25, 0.0])
        )
    else:
        # PPO: progress is the step's reward; the edit that fixed gets more than the one that
        # broke, by more than without it.
        gap = [b.policy[0].advantage - b.policy[2].advantage for b in (plain, credited)]
        assert gap[1] > gap[0]


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_per_environment_normalisation_weighs_every_environment_alike(algorithm: str) -> None:
    def ep(env: str, group: str, reward: float, chosen: int) -> Episode:
        e = _episode(f"{env} {group}", ["a", "b"], chosen, reward, group_id=group)
        return msgspec.structs.replace(e, environment=env, episode_id=f"{env}-{group}-{chosen}")

    episodes = [
        ep("shell", "s", 1.0, 0), ep("shell", "s", 0.0, 1),  # a contrast of 1
        ep("orchestrator", "o", 0.1, 0), ep("orchestrator", "o", 0.0, 1),  # of 0.1
        ep("orchestrator", "t", 0.5, 0), ep("orchestrator", "t", 0.5, 1),  # tied
    ]  # fmt: skip
    base = UpdateConfig(algorithm=algorithm, std_normalize=False)  # type: ignore[arg-type]
    plain = [s.advantage for s in build_batch(episodes, config=base).policy]
    both = build_batch(episodes, config=dataclasses.replace(base, env_normalize=True)).policy
    normed = [s.advantage for s in both]

    def rms(xs: list[float]) -> float:
        return math.sqrt(sum(x * x for x in xs) / len(xs))

    if algorithm == "grpo":
        # Without it the orchestrator's small contrast weighs a tenth of shell's.
        assert abs(plain[2]) == pytest.approx(0.1 * abs(plain[0]))
        assert rms(normed[:2]) == pytest.approx(1.0) and rms(normed[2:]) == pytest.approx(1.0)
        assert normed[4:] == [0.0, 0.0]  # a tied group's zero stays zero: scaled, not centred
        assert all((a > 0) == (b > 0) for a, b in zip(plain[:4], normed[:4], strict=True))
    else:
        # PPO: centred and scaled within each environment rather than over the batch.
        for part in (normed[:2], normed[2:]):
            assert sum(part) == pytest.approx(0.0, abs=1e-9)
            assert statistics.stdev(part) == pytest.approx(1.0)


def test_self_imitation_clones_only_the_updates_own_successes() -> None:
    won = _episode("state", ["a", "b"], 1, 1.0, outcome="success", group_id="g")
    lost = _episode("state", ["a", "b"], 0, 0.0, outcome="failure", group_id="g")
    assert build_batch([won, lost], config=UpdateConfig()).imitate == []
    batch = build_batch([won, lost], config=UpdateConfig(self_imitation=True))
    assert [(d.observation, i) for d, i in batch.imitate] == [("state", 1)]
    # A step of a success the environment measured as wasted (negative progress) is not copied.
    wasted = TrajectoryStep(
        index=0,
        observation="page",
        candidates=["scroll", "ok"],
        action="scroll",
        action_index=0,
        progress=-0.1,
    )
    kept = msgspec.structs.replace(won.trajectory[0], index=1)
    won2 = msgspec.structs.replace(won, trajectory=[wasted, kept], episode_id="w2")
    batch = build_batch([won2, lost], config=UpdateConfig(self_imitation=True))
    assert [(d.observation, i) for d, i in batch.imitate] == [("state", 1)]


def test_each_environment_can_learn_from_reward_its_own_way() -> None:
    # The campaign's recipe (self-imitation, step progress) for shell; browser's own: neither.
    def pair(env: str) -> list[Episode]:
        won, lost = (
            _two_step_episode(r, p, env) for r, p in ((1.0, (1.0, 0.0)), (0.0, (-0.5, 0.0)))
        )
        return [
            msgspec.structs.replace(e, environment=env, episode_id=f"{env}-{e.episode_id}",
                                    outcome="success" if e.env_reward else "failure")
            for e in (won, lost)
        ]  # fmt: skip

    episodes = [*pair("shell"), *pair("browser")]
    recipe = UpdateConfig(self_imitation=True, progress_coef=0.5)
    own = dataclasses.replace(
        recipe, by_environment={"browser": EnvironmentRecipe(self_imitation=False, progress_coef=0)}
    )
    assert recipe_for(own, "shell") == (True, 0.5) and recipe_for(own, "browser") == (False, 0)
    assert recipe_for(own, "orchestrator") == (True, 0.5)  # no recipe of its own: the campaign's
    both, split = build_batch(episodes, config=recipe), build_batch(episodes, config=own)
    plain = build_batch(episodes, config=UpdateConfig())
    # shell's samples are the recipe's either way; browser's are plain GRPO's.
    adv = [[s.advantage for s in b.policy] for b in (both, split, plain)]
    assert adv[1][:4] == adv[0][:4] and adv[1][4:] == adv[2][4:] and adv[0][4:] != adv[2][4:]
    assert {d.observation for d, _ in both.imitate} == {"state 0", "state 1"}
    assert len(split.imitate) == len(both.imitate) / 2  # only shell's success is copied
    half = dataclasses.replace(own, by_environment={"browser": EnvironmentRecipe(progress_coef=0)})
    assert recipe_for(half, "browser") == (True, 0)  # a field left None keeps the campaign's
    # The trainer settings carry it to the update.
    settings = TrainerSettings(by_environment={"browser": EnvironmentRecipe(self_imitation=False)})
    assert recipe_for(update_config(settings), "browser") == (False, 0.0)


def _hinted_batch_parts() -> tuple[Episode, Episode, Episode]:
    cands = ["apply edit 1", "apply edit 2", "apply edit 3"]
    hinted = _episode(
        "failing test in clamp",
        cands,
        0,
        0.0,
        teacher_signal=TeacherSignal(
            backend="oracle", hints=[TeacherHint(step=0, better_action="apply edit 2")]
        ),
    )
    boundary = _episode(
        "borderline",
        cands,
        0,
        0.0,
        teacher_signal=TeacherSignal(
            backend="oracle",
            boundary=True,
            hints=[TeacherHint(step=0, better_action="apply edit 3")],
        ),
    )
    positive = _episode("wrong slice in window", cands, 2, 1.0)
    return hinted, boundary, positive


def test_teacher_hints_distil_and_the_positive_lane_is_imitated() -> None:
    hinted, boundary, positive = _hinted_batch_parts()
    config = UpdateConfig(distill_coef=1.0, update_epochs=20, learning_rate=1e-2)
    batch = build_batch([hinted, boundary], config=config, positive=[positive])
    assert [i for _, i in batch.distill] == [1]  # the boundary case never teaches
    assert [i for _, i in batch.imitate] == [2]
    model = new_student(seed=0)
    metrics = update(model, None, batch, config)
    assert {"distill_loss", "imitation_loss"} <= set(metrics)
    learned = [batch.distill[0], batch.imitate[0]]
    ev = model.evaluate([d for d, _ in learned], [i for _, i in learned])
    assert ev.logprobs.exp().min().item() > 0.8


def test_a_hint_on_a_replayed_step_is_not_distilled_twice() -> None:
    """A continuation replays its parent's first steps: a hint the teacher gave on one of them
    is the parent's to learn from (its own copy of the step), never the continuation's."""
    hinted, _, _ = _hinted_batch_parts()
    step = hinted.trajectory[0]
    two = [step, msgspec.structs.replace(step, index=1)]
    signal = TeacherSignal(
        backend="oracle",
        hints=[
            TeacherHint(step=0, better_action="apply edit 2"),
            TeacherHint(step=1, better_action="apply edit 3"),
        ],
    )
    parent = msgspec.structs.replace(hinted, trajectory=two, teacher_signal=signal)
    replayed = msgspec.structs.replace(two[0], replayed=True)
    continuation = msgspec.structs.replace(
        parent, episode_id="child", trajectory=[replayed, two[1]]
    )
    config = UpdateConfig(distill_coef=1.0)
    assert [i for _, i in build_batch([parent], config=config).distill] == [1, 2]
    assert [i for _, i in build_batch([continuation], config=config).distill] == [2]


def test_without_distillation_hints_are_not_learned_from() -> None:
    """The default trainer settings learn from reward: no hint sample, no hint loss term, and
    the update is the same with or without the teacher's hints on the episodes."""
    assert TrainerSettings().distill_coef == 0.0 and UpdateConfig().distill_coef == 0.0
    hinted, _, positive = _hinted_batch_parts()
    hinted = msgspec.structs.replace(hinted, group_id="g")
    plain = msgspec.structs.replace(hinted, teacher_signal=None)
    rival = msgspec.structs.replace(hinted, episode_id="rival", env_reward=1.0, reward=1.0)
    config = update_config(TrainerSettings(learning_rate=1e-2))
    batch = build_batch([hinted, rival], config=config, positive=[positive])
    assert batch.distill == [] and len(batch.imitate) == 1
    models = []
    for episodes in ([hinted, rival], [plain, rival]):
        model = new_student(seed=0)
        metrics = update(
            model, None, build_batch(episodes, config=config, positive=[positive]), config
        )
        assert "distill_loss" not in metrics and "imitation_loss" in metrics
        models.append(model.to_bytes())
    assert models[0] == models[1]


def test_negative_lane_kl_keeps_the_policy_near_the_reference() -> None:
    cands = ["a", "b", "c", "d"]
    neg_states = [_episode(f"state {i}", cands, 1, 0.0) for i in range(8)]
    pushes = [_episode(f"state {i}", cands, 0, 1.0, group_id=f"g{i}") for i in range(8)] + [
        _episode(f"state {i}", cands, 1, 0.0, group_id=f"g{i}") for i in range(8)
    ]
    reference = new_student(seed=0)

    def kl_after(coef: float) -> float:
        model = new_student(seed=0)
        config = UpdateConfig(negative_kl_coef=coef, update_epochs=10, learning_rate=1e-2)
        update(model, reference, build_batch(pushes, config=config, negative=neg_states), config)
        decisions = [Decision(f"state {i}", tuple(cands)) for i in range(8)]
        with torch.no_grad():
            p = model.evaluate(decisions, [0] * 8).candidate_logprobs
            q = reference.evaluate(decisions, [0] * 8).candidate_logprobs
        return float(sum((a.exp() * (a - b)).sum() for a, b in zip(p, q, strict=True)) / 8)

    assert kl_after(5.0) < 0.5 * kl_after(0.0)


def test_empty_batch_is_an_error() -> None:
    with pytest.raises(StudentError, match="empty"):
        update(new_student(), None, build_batch([], config=UpdateConfig()), UpdateConfig())


def test_extreme_log_ratios_stay_finite() -> None:
    logp = torch.tensor([[0.0], [-200.0]], requires_grad=True)
    old = torch.tensor([[-200.0], [0.0]])
    loss, _ = clipped_surrogate(
        logp, old, torch.tensor([[-1.0], [1.0]]), clip_low=0.2, clip_high=0.28
    )
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logp.grad).all()
    for est in ("k1", "k2", "k3"):
        assert torch.isfinite(kl_penalty(torch.tensor([0.0]), torch.tensor([-500.0]), est)).all()  # type: ignore[arg-type]


def test_confidence_is_the_top_probability_and_its_lead() -> None:
    from aios_rl.student.base import confidence

    logp = torch.log(torch.tensor([0.2, 0.5, 0.3]))
    top, margin = confidence(logp)
    assert top == pytest.approx(0.5) and margin == pytest.approx(0.2)
    assert confidence(torch.log(torch.tensor([1.0]))) == pytest.approx((1.0, 1.0))
    assert confidence(torch.empty(0)) == (0.0, 0.0)


def test_act_reports_top1_probability_and_margin_of_its_distribution() -> None:
    model = new_student(seed=3)
    d = Decision("the light shows red", ("press a", "press b", "press c", "press d"), seed=1)
    out = model.act([d], Regime())[0]
    probs = model.evaluate([d], [out.action]).candidate_logprobs[0].exp()
    ordered = sorted(probs.tolist(), reverse=True)
    assert out.top1_prob == pytest.approx(ordered[0], abs=1e-5)
    assert out.margin == pytest.approx(ordered[0] - ordered[1], abs=1e-5)
    assert 0 < out.margin <= out.top1_prob <= 1


def test_temperature_sharpens_or_flattens_what_is_sampled() -> None:
    """A decoding regime acts on the distribution actions are drawn from: on one fixed
    checkpoint, temperature 0.1 draws with lower entropy than 1.0, and 1.5 with higher."""
    model = new_student(seed=4)
    with torch.no_grad():  # a fixed checkpoint with a peaked policy (an untrained one is flat)
        for p in model.parameters():
            p.mul_(4)
    candidates = tuple(f"action {i}" for i in range(6))

    def drawn_entropy(temperature: float) -> float:
        decisions = [Decision("a fixed observation", candidates, seed=s) for s in range(600)]
        outs = model.act(decisions, Regime(temperature=temperature))
        counts = torch.bincount(torch.tensor([o.action_index for o in outs]), minlength=6)
        p = counts.float() / counts.sum()
        return float(-(p[p > 0] * p[p > 0].log()).sum())

    cold, warm, hot = drawn_entropy(0.1), drawn_entropy(1.0), drawn_entropy(1.5)
    assert cold < warm < hot, (cold, warm, hot)


def test_reward_contrast_is_the_groups_population_variance() -> None:
    from aios_rl.student.losses import reward_contrast

    assert reward_contrast([1.0, 0.0, 0.5, 0.5]) == pytest.approx(0.125)  # mean 0.5
    assert reward_contrast([0.3, 0.3, 0.3]) == 0.0 and reward_contrast([0.9]) == 0.0
    # A branch that adds a differing outcome raises the contrast: RAIL's gain is positive.
    assert reward_contrast([0.0, 0.0, 1.0]) > reward_contrast([0.0, 0.0])


def test_a_tree_group_credits_each_episode_only_for_the_steps_it_sampled() -> None:
    """One task's tree: two base rollouts and a continuation branched from the first after its
    first step. Advantages are normalised over the whole tree (one group), and the continuation's
    replayed prefix is not credited again: the shared step counts once, for its parent."""
    opts = ["left", "right"]

    def step(i: int, action: str, *, replayed: bool = False) -> TrajectoryStep:
        return TrajectoryStep(
            index=i,
            observation=f"state {i}",
            candidates=opts,
            action=action,
            action_index=opts.index(action),
            logprob=-0.69,
            replayed=replayed,
        )

    parent = Episode(
        episode_id="p",
        environment="shell",
        task_id="t",
        group_id="g",
        env_reward=1.0,
        trajectory=[step(0, "left"), step(1, "left"), step(2, "right")],
    )
    sibling = Episode(
        episode_id="s",
        environment="shell",
        task_id="t",
        group_id="g",
        env_reward=0.0,
        trajectory=[step(0, "right"), step(1, "right")],
    )
    branch = Episode(
        episode_id="b",
        environment="shell",
        task_id="t",
        group_id="g",
        env_reward=0.5,
        trajectory=[step(0, "left", replayed=True), step(1, "right"), step(2, "right")],
    )
    batch = build_batch([parent, sibling, branch], config=UpdateConfig(std_normalize=True))
    # By hand: rewards 1, 0, 0.5 -> mean 0.5, sample std 0.5 -> advantages +1, -1, 0.
    by_episode = [s.advantage for s in batch.policy]
    assert len(batch.policy) == 3 + 2 + 2  # the branch's replayed step is not a sample
    assert by_episode[:3] == pytest.approx([1.0] * 3, abs=1e-5)  # std + eps 1e-6
    assert by_episode[3:5] == pytest.approx([-1.0] * 2, abs=1e-5)
    assert by_episode[5:] == pytest.approx([0.0] * 2)
    shared = [s for s in batch.policy if s.decision.observation == "state 0"]
    assert len(shared) == 2  # state 0 for the parent and the sibling; never again for the branch


def test_reward_signal_says_what_policy_gradient_can_learn_from() -> None:
    cands = ["a", "b"]
    tied = [_episode(f"s{i}", cands, 0, 1.0, group_id="tied") for i in range(2)]
    split = [_episode(f"t{i}", cands, i, float(i), group_id="split") for i in range(2)]
    hint = TeacherSignal(backend="oracle", hints=[TeacherHint(step=0, better_action="b")])
    hinted = msgspec.structs.replace(split[0], teacher_signal=hint)
    got = reward_signal([*tied, hinted, split[1]])
    assert got["groups"] == 2 and got["tied_group_share"] == 0.5
    assert got["reward_mean"] == 0.75 and got["group_reward_std"] == 0.25
    assert got["hinted_share"] == 0.25
    # Reported with every update.
    config = UpdateConfig(update_epochs=1)
    metrics, _ = train_step(new_student(seed=0), None, [*tied, *split], config)
    assert metrics["tied_group_share"] == 0.5 and "grad_norm" in metrics


def test_credit_by_kind_says_which_kinds_of_action_policy_gradient_pushes_up_or_down() -> None:
    from aios_rl.student.train import action_kind, credit_by_kind

    assert action_kind("calc.py:3: `a - b` -> `a + b`") == "edit"
    assert action_kind("run the tests") == "run" and action_kind("Submit") == "submit"
    assert action_kind("") == "none"
    edit = "calc.py:3: `a - b` -> `a + b`"
    cands = ["run the tests", "submit", edit]

    def ep(name: str, actions: list[str], reward: float) -> Episode:
        steps = [
            TrajectoryStep(
                index=i, observation=f"o{i}", candidates=cands, action=a,
                action_index=cands.index(a), logprob=-1.1,
            )
            for i, a in enumerate(actions)
        ]  # fmt: skip
        return Episode(
            episode_id=name, environment="shell", task_id="t", group_id="g",
            trajectory=steps, env_reward=reward, reward=reward,
        )  # fmt: skip

    # Group mean 0.5: the solver (+0.5) ran the tests, edited and submitted; the other (-0.5)
    # submitted at once.
    got = credit_by_kind(
        [ep("win", ["run the tests", edit, "submit"], 1.0), ep("lose", ["submit"], 0.0)]
    )
    assert got["steps_mean"] == 2.0
    assert got["share:submit"] == 0.5 and got["share:edit"] == 0.25
    assert got["credit:submit"] == 0.0  # once in each: +0.5 and -0.5
    assert got["credit:run"] == 0.5 and got["credit:edit"] == 0.5
    assert credit_by_kind([]) == {}
    # Reported with every update, beside the reward signal.
    assert "credit:submit" in reward_signal([ep("a", ["submit"], 1.0), ep("b", ["submit"], 0.0)])
