// teacher-ts: an aios-rl teacher backend outside Python. It answers teacher.request.ts (under the
// stack's namespace) as a nats.micro service endpoint, validates every request against the
// published JSON Schema (contracts/schema/teacher_request.v1.json) with Ajv, judges it by rule
// (src/judge.ts) and replies with a teacher_signal.v1 (validated too) and its Aios-Schema header;
// a request that does not validate gets an error reply: the service API's headers and an
// error.v1 body, as every Python endpoint sends. Select it in the gateway like any backend
// (the gateway's control key: backend "ts").
//
// Environment: NATS_URL (comma-separated members of a cluster), NATS_USER / NATS_PASSWORD or
// AIOS_CREDENTIALS (a credentials file), AIOS_NAMESPACE, AIOS_SCHEMA_DIR (default
// ../../contracts/schema from this package).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";
import { connect, headers, type ServiceMsg } from "nats";
import type { ErrorReply, TeacherRequest, TeacherSignal } from "./contracts.js";
import { BACKEND, judge } from "./judge.js";

const SCHEMA_HEADER = "Aios-Schema";
const here = dirname(fileURLToPath(import.meta.url));
const schemaDir = process.env.AIOS_SCHEMA_DIR ?? join(here, "..", "..", "..", "contracts", "schema");
const namespace = process.env.AIOS_NAMESPACE ?? "";
const prefix = namespace ? `${namespace}.` : "";

// msgspec marks tagged unions with an annotation-only "discriminator" keyword: declare it, so
// every published schema loads in strict mode (the two this teacher uses have none).
const ajv = new Ajv2020.default({ strict: true, allErrors: true });
ajv.addKeyword({ keyword: "discriminator", schemaType: "object" });
const load = (name: string) => JSON.parse(readFileSync(join(schemaDir, `${name}.json`), "utf8"));
const validRequest = ajv.compile<TeacherRequest>(load("teacher_request.v1"));
const validSignal = ajv.compile<TeacherSignal>(load("teacher_signal.v1"));

// Credentials: NATS_USER / NATS_PASSWORD, else the JSON file AIOS_CREDENTIALS names (the
// teacher-ts.json that `aios-rl up` / `aios-rl auth compose` write under auth/).
const creds = process.env.AIOS_CREDENTIALS && !process.env.NATS_USER
  ? JSON.parse(readFileSync(process.env.AIOS_CREDENTIALS, "utf8")) as { user: string; password: string }
  : { user: process.env.NATS_USER ?? "", password: process.env.NATS_PASSWORD ?? "" };
const nc = await connect({
  servers: (process.env.NATS_URL ?? "nats://127.0.0.1:4222").split(","),
  user: creds.user || undefined,
  pass: creds.password || undefined,
  // Replies to this user's requests arrive on its own inbox, which its permissions allow.
  inboxPrefix: creds.user ? `_INBOX.${creds.user}` : undefined,
  name: "teacher-ts",
  maxReconnectAttempts: -1,
});

const service = await nc.services.add({
  name: "teacher-ts",
  version: "0.1.0",
  description: "A rule-based teacher in TypeScript (examples/teacher-ts).",
  metadata: { namespace, pid: String(process.pid) },
});
const enc = new TextEncoder();
const dec = new TextDecoder();

function replyError(msg: ServiceMsg, code: number, message: string): void {
  const body: ErrorReply = {
    code: String(code),
    message,
    expected_schema: "teacher_request.v1",
    service: "teacher-ts",
    endpoint: "judge",
  };
  const h = headers();
  h.set(SCHEMA_HEADER, "error.v1");
  msg.respondError(code, message.replace(/\s+/g, " ").slice(0, 500), enc.encode(JSON.stringify(body)), { headers: h });
}

service.addEndpoint("judge", {
  subject: `${prefix}teacher.request.${BACKEND}`,
  metadata: { request_schema: "teacher_request.v1", response_schema: "teacher_signal.v1" },
  handler: (err, msg) => {
    if (err) return;
    const schema = msg.headers?.get(SCHEMA_HEADER);
    if (schema && schema !== "teacher_request.v1") {
      return replyError(msg, 400, `wrong_schema: ${schema}, expected teacher_request.v1`);
    }
    let req: unknown;
    try {
      req = JSON.parse(dec.decode(msg.data));
    } catch (e) {
      return replyError(msg, 400, `invalid_payload: ${(e as Error).message}`);
    }
    if (!validRequest(req)) {
      return replyError(msg, 400, `invalid_payload: ${ajv.errorsText(validRequest.errors)}`);
    }
    const started = performance.now();
    const signal = { ...judge(req), latency_s: (performance.now() - started) / 1000 };
    if (!validSignal(signal)) {
      return replyError(msg, 500, `the signal does not fit teacher_signal.v1: ${ajv.errorsText(validSignal.errors)}`);
    }
    const h = headers();
    h.set(SCHEMA_HEADER, "teacher_signal.v1");
    msg.respond(enc.encode(JSON.stringify(signal)), { headers: h });
  },
});

console.log(JSON.stringify({ event: "service.ready", service: "teacher-ts", subject: `${prefix}teacher.request.${BACKEND}` }));
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, async () => {
    await service.stop();
    await nc.drain();
    process.exit(0);
  });
}
await nc.closed();
