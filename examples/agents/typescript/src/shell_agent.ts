// A plain agent loop over the `openai` npm package: read the episode, ask the model for an
// action, take it, until the episode is done. It knows nothing of aios-rl beyond two URLs:
// OPENAI_BASE_URL / OPENAI_API_KEY (read by the client) and AIOS_ENV_URL, its episode
// (GET the state, POST <url>/step an action) with the same key; AIOS_EPISODE_ID tags its
// requests (OpenAI's `user` field).
import OpenAI from "openai";

interface EpisodeState {
  observation: string;
  candidates: string[];
  done: boolean;
  outcome: string | null;
  reward: number | null;
}

const SYSTEM =
  "You fix a bug in a small repository. Reply with exactly one of the listed actions, " +
  "copied exactly, and nothing else.";
const MAX_OBSERVATION = 4000;

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

async function call(method: string, url: string, body?: unknown): Promise<EpisodeState> {
  const resp = await fetch(url, {
    method,
    headers: {
      Authorization: `Bearer ${env("OPENAI_API_KEY")}`,
      "Content-Type": "application/json",
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) throw new Error(`${method} ${url}: ${resp.status} ${await resp.text()}`);
  return (await resp.json()) as EpisodeState;
}

function prompt(state: EpisodeState): string {
  let text = state.observation.slice(-MAX_OBSERVATION);
  if (state.candidates.length > 0) {
    text += "\n\nActions:\n" + state.candidates.map((c) => `- ${c}`).join("\n");
  }
  return text;
}

// The listed action the reply names (the longest one it contains), else the reply.
function actionOf(reply: string, candidates: string[]): string {
  const text = reply.trim();
  if (candidates.includes(text)) return text;
  const named = candidates.filter((c) => text.includes(c));
  return named.length > 0 ? named.reduce((a, b) => (b.length > a.length ? b : a)) : text;
}

async function main(): Promise<void> {
  const client = new OpenAI();
  const episode = env("AIOS_EPISODE_ID");
  const url = env("AIOS_ENV_URL");
  const model = process.env.AIOS_MODEL ?? "active";
  let state = await call("GET", url);
  while (!state.done) {
    const reply = await client.chat.completions.create({
      model,
      messages: [
        { role: "system", content: SYSTEM },
        { role: "user", content: prompt(state) },
      ],
      max_tokens: 48,
      temperature: 1.0,
      user: episode,
    });
    const text = reply.choices[0]?.message.content ?? "";
    state = await call("POST", `${url}/step`, { action: actionOf(text, state.candidates) });
  }
  console.log(`episode ${episode}: ${state.outcome} (reward ${state.reward})`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
