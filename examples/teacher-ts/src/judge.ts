// The rule-based judgement: a pure function of the request (no NATS here), so it is tested on
// its own (src/judge.test.ts) and reads like a spec of what this teacher says.
import type { TeacherHint, TeacherRequest, TeacherSignal } from "./contracts.js";

export const BACKEND = "ts";

/** Steps beyond which a success counts as slow. */
export const SLOW_STEPS = 6;

const RUN_TESTS = "run the tests";
const SUBMIT = "submit";

export function judge(req: TeacherRequest): TeacherSignal {
  const steps = req.steps ?? [];
  switch (req.outcome ?? "failure") {
    case "success": {
      const slow = steps.length > SLOW_STEPS;
      return signal(slow ? 0.6 : 1.0, "correct", [], slow
        ? `succeeded in ${steps.length} steps (more than ${SLOW_STEPS})`
        : `succeeded in ${steps.length} steps`);
    }
    case "partial":
      return signal(0.3, "partially_correct", untestedSubmit(steps), "some of the work was done");
    case "blocked":
      return { ...signal(0.0, "unsure", [], "the episode was blocked"), boundary: true };
    default:
      return signal(-0.5, "incorrect", untestedSubmit(steps), "the task was not done");
  }
}

/** A hint at a submit taken while "run the tests" was on offer and never taken before it. */
function untestedSubmit(steps: NonNullable<TeacherRequest["steps"]>): TeacherHint[] {
  const hints: TeacherHint[] = [];
  let tested = false;
  for (const s of steps) {
    if (s.action === RUN_TESTS) tested = true;
    if (s.action === SUBMIT && !tested && (s.candidates ?? []).includes(RUN_TESTS)) {
      hints.push({ step: s.index, better_action: RUN_TESTS, note: "submitted without testing" });
    }
  }
  return hints;
}

function signal(
  score: number,
  verdict: NonNullable<TeacherSignal["verdict"]>,
  hints: TeacherHint[],
  why: string,
): TeacherSignal {
  return { backend: BACKEND, status: "ok", verdict, score, hints, boundary: false,
           rationale: `teacher-ts rule: ${why}` };
}
