#!/usr/bin/env node
// Publish agent traces to Combee Streams from Node.js (kafkajs), validated with ajv against schemas/trace.v1.json.
//
//   node producer.js --bootstrap localhost:9092 --file traces.jsonl
//   node producer.js --bootstrap localhost:9092 --generate 10 --playbook support-bot
//
// Valid traces go to <prefix>traces keyed by playbook_id with the header schema_version=1 (docs/protocol.md);
// invalid ones are reported on stderr (line number and what is wrong) and not sent (with --strict, nothing is sent
// when any is invalid). A JSON summary goes to stdout; `combee produce` behaves the same.
// Exit status: 0 all sent, 1 some traces were rejected (the valid ones were still sent, unless --strict),
// 2 delivery failed, 64 bad flags.
import { readFileSync } from "node:fs";
import { join } from "node:path";

import kafkajs from "kafkajs";

import { SCHEMAS_DIR, describeErrors, loadValidator, makeKafka, parseFlags } from "./common.js";

const { Partitioners } = kafkajs;
const MAX_MESSAGE_BYTES = 1_048_576; // the reflector dead-letters larger traces

const args = parseFlags({
  bootstrap: { type: "string" },
  prefix: { type: "string", default: "combee." },
  file: { type: "string" },
  generate: { type: "string" },
  playbook: { type: "string", default: "demo" },
  seed: { type: "string", default: "0" },
  schema: { type: "string", default: join(SCHEMAS_DIR, "trace.v1.json") },
  strict: { type: "boolean", default: false },
}, "usage: producer.js --bootstrap HOST:PORT [--prefix P] (--file FILE.jsonl | --generate N [--playbook ID] "
  + "[--seed S]) [--schema trace.v1.json] [--strict]\n"
  + "  sends the valid traces and reports each invalid one (exit 1); --strict: sends nothing if any is invalid",
(values) => values.bootstrap && (values.file === undefined) !== (values.generate === undefined));

/** A small seeded generator (mulberry32) so generated traces are reproducible. */
function seededRandom(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** [label, text] pairs: the file's non-blank lines, or made-up traces of a small arithmetic task. */
function inputs() {
  if (args.file !== undefined) {
    const text = readFileSync(args.file === "-" ? 0 : args.file, "utf-8");
    return text.split("\n").map((line, i) => [`line ${i + 1}`, line]).filter(([, line]) => line.trim());
  }
  const random = seededRandom(Number(args.seed));
  const count = Number(args.generate);
  return Array.from({ length: count }, (_, i) => {
    const a = 2 + Math.floor(random() * 98);
    const b = 2 + Math.floor(random() * 98);
    const correct = random() < 0.6;
    const answer = correct ? a * b : a * b + 10;
    const id = Math.floor(random() * 2 ** 32).toString(16).padStart(8, "0");
    const trace = {
      schema_version: 1,
      trace_id: `node-${args.seed}-${i}-${id}`,
      playbook_id: args.playbook,
      playbook_version: 0,
      agent_id: `node-agent-${i % 3}`,
      task_id: `multiply-${a}-${b}`,
      input: `What is ${a} * ${b}?`,
      output: String(answer),
      feedback: correct ? "correct" : `wrong: expected ${a * b}; carry digits when multiplying`,
      score: correct ? 1.0 : 0.0,
      success: correct,
      steps: [{ role: "assistant", content: `${a} * ${b} = ${answer}`, tool: null }],
      metadata: { client: "kafkajs" },
      created_at: new Date().toISOString(),
    };
    return [`trace ${i + 1}`, JSON.stringify(trace)];
  });
}

const validate = loadValidator(args.schema);
const topic = `${args.prefix}traces`;
const messages = [];
const sent = [];
let rejected = 0;
for (const [label, line] of inputs()) {
  let trace;
  try {
    trace = JSON.parse(line);
  } catch (error) {
    process.stderr.write(`${label}: rejected: invalid JSON: ${error.message}\n`);
    rejected += 1;
    continue;
  }
  const value = Buffer.from(line.trim(), "utf-8");
  let problems = validate(trace) ? [] : describeErrors(validate.errors);
  if (!problems.length && value.length > MAX_MESSAGE_BYTES) {
    problems = [`<root>: ${value.length} bytes, over the ${MAX_MESSAGE_BYTES}-byte limit`];
  }
  if (problems.length) {
    process.stderr.write(`${label}: rejected: does not match trace.v1.json: ${problems.slice(0, 5).join("; ")}\n`);
    rejected += 1;
    continue;
  }
  messages.push({ key: trace.playbook_id, value, headers: { schema_version: "1" } });
  sent.push(trace.trace_id);
}

if (rejected && args.strict) {
  process.stdout.write(`${JSON.stringify({ topic, sent: [], rejected })}\n`);
  process.stderr.write(`${rejected} invalid trace(s); nothing sent (--strict)\n`);
  process.exit(1);
}

const kafka = makeKafka(args.bootstrap, "combee-node-producer");
// DefaultPartitioner is kafkajs 2's Java-compatible murmur2: a playbook's traces land on the same partition as
// with the Java and Python producers. No idempotence: the embedded Tansu broker cannot do it.
const producer = kafka.producer({
  createPartitioner: Partitioners.DefaultPartitioner,
  idempotent: false,
  allowAutoTopicCreation: false,
});
try {
  await producer.connect();
  if (messages.length) {
    await producer.send({ topic, acks: -1, messages });
  }
} catch (error) {
  process.stderr.write(`delivery failed: ${error.message}\n`);
  await producer.disconnect().catch(() => {});
  process.exit(2);
}
await producer.disconnect();
process.stdout.write(`${JSON.stringify({ topic, sent, rejected })}\n`);
process.stderr.write(`sent ${sent.length} trace(s) to ${topic}; rejected ${rejected}\n`);
process.exit(rejected ? 1 : 0);
