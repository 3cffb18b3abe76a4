import { test } from "node:test";
import assert from "node:assert/strict";
import { judge } from "./judge.js";

const base = { request_id: "r", episode_id: "e", environment: "shell", task_id: "t" };

test("a quick success is correct, a slow one scores less", () => {
  const step = (i: number) => ({ index: i, observation: "o", action: "a" });
  assert.equal(judge({ ...base, outcome: "success", steps: [step(0)] }).score, 1.0);
  const slow = judge({ ...base, outcome: "success", steps: [0, 1, 2, 3, 4, 5, 6].map(step) });
  assert.equal(slow.score, 0.6);
  assert.equal(slow.verdict, "correct");
});

test("a failure that submitted untested gets a hint at the submit", () => {
  const sig = judge({
    ...base,
    outcome: "failure",
    steps: [{ index: 0, observation: "o", action: "submit", candidates: ["run the tests", "submit"] }],
  });
  assert.equal(sig.verdict, "incorrect");
  assert.deepEqual(sig.hints, [{ step: 0, better_action: "run the tests", note: "submitted without testing" }]);
});

test("a blocked episode is a boundary case", () => {
  const sig = judge({ ...base, outcome: "blocked" });
  assert.equal(sig.boundary, true);
  assert.equal(sig.score, 0);
});
