#!/usr/bin/env node
// Follow the playbook versions Combee Streams serves, from Node.js (kafkajs).
//
//   node subscriber.js --bootstrap localhost:9092 --playbook support-bot --max-versions 5
//   node subscriber.js --bootstrap localhost:9092 --candidates   # every version, promoted or not
//
// By default reads <prefix>promoted from the beginning (runs with promotion on: each counting record's `served`
// is the whole playbook agents should run) and prints one JSON line per decision. With --candidates it reads
// <prefix>playbook (each record is a whole playbook, so the newest record of a playbook_id is its newest
// candidate) and prints one JSON line per version. kafkajs can only consume through a
// consumer group, so each subscriber uses a group of its own (a shared group would split the topic between agents).
// Exit status: 0 when --max-versions versions were seen (or on SIGINT/SIGTERM), 3 on --timeout.
import { randomUUID } from "node:crypto";
import { join } from "node:path";

import { CONSUMER_TIMEOUTS, SCHEMAS_DIR, describeErrors, loadValidator, makeKafka, parseFlags } from "./common.js";

const SUPPORTED_SCHEMA_VERSIONS = new Set([1]);

const args = parseFlags({
  bootstrap: { type: "string" },
  prefix: { type: "string", default: "combee." },
  playbook: { type: "string" },
  "max-versions": { type: "string" },
  timeout: { type: "string" },
  group: { type: "string" },
  entries: { type: "boolean", default: false },
  candidates: { type: "boolean", default: false },
  schema: { type: "string" },
}, "usage: subscriber.js --bootstrap HOST:PORT [--prefix P] [--playbook ID] "
  + "[--max-versions N] [--timeout S] [--group G] [--entries] [--candidates]", (values) => Boolean(values.bootstrap));

const validate = loadValidator(args.schema
  ?? join(SCHEMAS_DIR, args.candidates ? "playbook_version.v1.json" : "promotion_decision.v1.json"));
const topic = `${args.prefix}${args.candidates ? "playbook" : "promoted"}`;
const maxVersions = args["max-versions"] === undefined ? Infinity : Number(args["max-versions"]);
const kafka = makeKafka(args.bootstrap, "combee-node-subscriber");
const consumer = kafka.consumer({
  groupId: args.group ?? `${args.prefix}subscriber.${randomUUID()}`,
  ...CONSUMER_TIMEOUTS,
  maxBytes: 16 * 1024 * 1024,
  maxBytesPerPartition: 16 * 1024 * 1024,
});

let seen = 0;
let finished = false;
let resolveDone;
const done = new Promise((resolve) => { resolveDone = resolve; });
async function finish(code, message) {
  if (finished) return;
  finished = true;
  if (message) process.stderr.write(`${message}\n`);
  await consumer.disconnect().catch(() => {});
  resolveDone(code);
}
process.on("SIGINT", () => finish(0));
process.on("SIGTERM", () => finish(0));
if (args.timeout !== undefined) {
  setTimeout(() => finish(3, `timed out after ${args.timeout} s with ${seen} version(s)`),
    Number(args.timeout) * 1000).unref();
}

const latest = new Map();

/** Promoted mode: the reading rule on decision ids, then one line per decision (its `served` is the pointer). */
function takeDecision(decision) {
  if (decision.decision_id !== (latest.get(decision.playbook_id) ?? -1) + 1) return null;
  latest.set(decision.playbook_id, decision.decision_id);
  if (args.playbook && decision.playbook_id !== args.playbook) return null;
  const served = decision.served;
  return {
    playbook_id: decision.playbook_id,
    decision_id: decision.decision_id,
    action: decision.action,
    version: decision.served_version,
    candidate_version: decision.candidate_version,
    entries: args.entries ? (served?.entries ?? []).map((e) => `[${e.section}] ${e.content}`)
      : (served?.entries ?? []).length,
    content_hash: served?.content_hash ?? null,
    reason: decision.reason,
  };
}
await consumer.connect();
await consumer.subscribe({ topic, fromBeginning: true });
process.stderr.write(`following ${topic}\n`);
await consumer.run({
  autoCommit: false, // nothing to resume: a subscriber re-reads the topic to find the current version
  eachMessage: async ({ message }) => {
    if (finished) return;
    const version = JSON.parse(message.value.toString("utf-8"));
    if (!SUPPORTED_SCHEMA_VERSIONS.has(version.schema_version)) {
      process.stderr.write(`skipping a record with schema_version ${version.schema_version} at offset `
        + `${message.offset}: this subscriber understands ${[...SUPPORTED_SCHEMA_VERSIONS]}\n`);
      return;
    }
    if (!validate(version)) {
      process.stderr.write(`skipping an invalid version at offset ${message.offset}: `
        + `${describeErrors(validate.errors).slice(0, 3).join("; ")}\n`);
      return;
    }
    if (!args.candidates) {
      const decisionLine = takeDecision(version);
      if (decisionLine === null) return;
      process.stdout.write(`${JSON.stringify(decisionLine)}\n`);
      seen += 1;
      if (seen >= maxVersions) setImmediate(() => finish(0));
      return;
    }
    // The reading rule (docs/protocol.md): per playbook, only version latest+1 counts; a record with a number
    // already taken was written by a fenced writer and is ignored.
    if (version.version !== (latest.get(version.playbook_id) ?? 0) + 1) return;
    latest.set(version.playbook_id, version.version);
    if (args.playbook && version.playbook_id !== args.playbook) return;
    const line = {
      playbook_id: version.playbook_id,
      version: version.version,
      parent_version: version.parent_version,
      batch_id: version.batch_id,
      entries: args.entries ? version.entries.map((e) => `[${e.section}] ${e.content}`) : version.entries.length,
      operations: version.operations.length,
      lineage: version.lineage.length,
      content_hash: version.content_hash,
    };
    process.stdout.write(`${JSON.stringify(line)}\n`);
    seen += 1;
    if (seen >= maxVersions) {
      // Disconnecting from inside eachMessage would wait for this handler: finish after it returns.
      setImmediate(() => finish(0));
    }
  },
});
process.exit(await done);
