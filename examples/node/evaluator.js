#!/usr/bin/env node
// An evaluator for Combee Streams' promotion, in Node.js (kafkajs): answers evaluation requests with scores.
//
//   node evaluator.js --bootstrap localhost:9092 [--prefix combee.] [--max-results N] [--timeout S]
//
// Consumes <prefix>eval-requests in one consumer group shared by every evaluator process (each request is answered
// once), validates each request against schemas/eval_request.v1.json, scores the playbook it carries on its task and
// writes an EvalResult (validated against schemas/eval_result.v1.json) to <prefix>eval-results keyed by playbook_id
// (docs/protocol.md, "Writing an evaluator"). Run the workers with --promotion and without the built-in `evaluate`
// stage. The judge here is a toy keyword judge standing in for an LLM judge: a task of the synthetic suite is
// "R07-021" (rule family R07); the playbook scores 0.9 on it when an entry names R07 and does not tell the agent to
// skip the check, 0.1 when an entry tells it to skip the check, else 0.3. Deterministic, so replays agree.
// Exit status: 0 after --max-results answers (or on SIGINT/SIGTERM), 3 on --timeout, 2 on a delivery failure.
import { join } from "node:path";

import kafkajs from "kafkajs";

import { CONSUMER_TIMEOUTS, SCHEMAS_DIR, describeErrors, loadValidator, makeKafka, parseFlags } from "./common.js";

const { Partitioners } = kafkajs;
const EVALUATOR = "node-example";
const EVALUATOR_MODEL = "node-example/keyword-judge";

const args = parseFlags({
  bootstrap: { type: "string" },
  prefix: { type: "string", default: "combee." },
  group: { type: "string" },
  "max-results": { type: "string" },
  timeout: { type: "string" },
}, "usage: evaluator.js --bootstrap HOST:PORT [--prefix P] [--group G] [--max-results N] "
  + "[--timeout S]", (values) => Boolean(values.bootstrap));

const validateRequest = loadValidator(join(SCHEMAS_DIR, "eval_request.v1.json"));
const validateResult = loadValidator(join(SCHEMAS_DIR, "eval_result.v1.json"));
const maxResults = args["max-results"] === undefined ? Infinity : Number(args["max-results"]);

/** The toy judge: the score of a playbook (its entries) on one task of the synthetic suite. */
export function judge(entries, taskId) {
  const family = taskId.split("-")[0].toLowerCase();
  const naming = entries.filter((e) => e.content.toLowerCase().includes(`(${family})`));
  if (naming.some((e) => e.content.toLowerCase().includes("skip the check"))) return 0.1;
  return naming.length > 0 ? 0.9 : 0.3;
}

const kafka = makeKafka(args.bootstrap, "combee-node-evaluator");
const consumer = kafka.consumer({
  groupId: args.group ?? `${args.prefix}node-evaluator`,
  ...CONSUMER_TIMEOUTS,
  maxBytes: 16 * 1024 * 1024,
  maxBytesPerPartition: 16 * 1024 * 1024,
});
const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, idempotent: false });

let answered = 0;
let finished = false;
let resolveDone;
const done = new Promise((resolve) => { resolveDone = resolve; });
async function finish(code, message) {
  if (finished) return;
  finished = true;
  if (message) process.stderr.write(`${message}\n`);
  await consumer.disconnect().catch(() => {});
  await producer.disconnect().catch(() => {});
  resolveDone(code);
}
process.on("SIGINT", () => finish(0));
process.on("SIGTERM", () => finish(0));
if (args.timeout !== undefined) {
  setTimeout(() => finish(3, `timed out after ${args.timeout} s with ${answered} answer(s)`),
    Number(args.timeout) * 1000).unref();
}

await producer.connect();
await consumer.connect();
await consumer.subscribe({ topic: `${args.prefix}eval-requests`, fromBeginning: true });
process.stderr.write(`answering ${args.prefix}eval-requests\n`);
await consumer.run({
  autoCommit: true, // a request answered twice is harmless: the promoter keeps the first result of each pair
  eachMessage: async ({ message }) => {
    if (finished) return;
    const request = JSON.parse(message.value.toString("utf-8"));
    if (!validateRequest(request)) {
      process.stderr.write(`skipping an invalid request at offset ${message.offset}: `
        + `${describeErrors(validateRequest.errors).slice(0, 3).join("; ")}\n`);
      return;
    }
    const result = {
      schema_version: 1,
      request_id: request.request_id,
      playbook_id: request.playbook_id,
      digest: request.digest,
      task_id: request.task_id,
      task_set: request.task_set, // echoed: results are cached by (digest, task_set, task_id)
      score: judge(request.entries, request.task_id),
      error: "",
      evaluator: EVALUATOR,
      evaluator_model: EVALUATOR_MODEL,
      evaluated_at: new Date().toISOString(),
    };
    if (!validateResult(result)) {
      await finish(2, `built an invalid result: ${describeErrors(validateResult.errors).join("; ")}`);
      return;
    }
    try {
      await producer.send({
        topic: `${args.prefix}eval-results`,
        acks: -1,
        messages: [{ key: request.playbook_id, value: JSON.stringify(result) }],
      });
    } catch (error) {
      await finish(2, `could not deliver a result: ${error.message}`);
      return;
    }
    answered += 1;
    process.stdout.write(`${JSON.stringify({ request_id: result.request_id, score: result.score })}\n`);
    if (answered >= maxResults) setImmediate(() => finish(0));
  },
});
process.exit(await done);
