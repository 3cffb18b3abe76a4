"""A plain agent loop over the ``openai`` package: read the episode, ask the model for an
action, take it, until the episode is done. It knows nothing of aios-rl beyond two URLs:

- ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``: a chat-completions endpoint and its key (the
  ``openai`` client reads both);
- ``AIOS_ENV_URL``: its episode (``GET`` the state, ``POST <url>/step`` an action), with the
  same key; ``AIOS_EPISODE_ID`` tags its requests (OpenAI's ``user`` field).

Run by a runner with ``agent_cmd`` (``aios-rl train --agent-cmd "python
examples/agents/python/shell_agent.py"``), or by hand against a running gateway.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

from openai import OpenAI

SYSTEM = (
    "You fix a bug in a small repository. Reply with exactly one of the listed actions, "
    "copied exactly, and nothing else."
)
MAX_OBSERVATION = 4000
"""Characters of the observation shown to the model (its tail: the latest output)."""


def call(method: str, url: str, body: dict | None = None) -> dict:
    """One request to the episode's URL, with the agent's key."""
    req = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def prompt(state: dict) -> str:
    text = state["observation"][-MAX_OBSERVATION:]
    if state["candidates"]:
        text += "\n\nActions:\n" + "\n".join(f"- {c}" for c in state["candidates"])
    return text


def action_of(reply: str, candidates: list[str]) -> str:
    """The listed action the reply names (the longest one it contains), else the reply."""
    reply = reply.strip()
    if reply in candidates:
        return reply
    named = [c for c in candidates if c in reply]
    return max(named, key=len) if named else reply


def main() -> int:
    client = OpenAI()
    episode = os.environ["AIOS_EPISODE_ID"]
    url = os.environ["AIOS_ENV_URL"]
    model = os.environ.get("AIOS_MODEL", "active")
    state = call("GET", url)
    while not state["done"]:
        reply = client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": prompt(state)},
            ],
            max_tokens=48,
            temperature=1.0,
            user=episode,
        )
        text = reply.choices[0].message.content or ""
        state = call("POST", f"{url}/step", {"action": action_of(text, state["candidates"])})
    print(f"episode {episode}: {state['outcome']} (reward {state['reward']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
