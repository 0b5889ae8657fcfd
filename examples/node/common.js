// What the Node.js producer and subscriber share: argument parsing, JSON Schema validation, kafkajs settings.
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import Ajv2020Module from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import kafkajs from "kafkajs";

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;
const { Kafka, logLevel } = kafkajs;

export const SCHEMAS_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "schemas");

/** A validator for one of the published schemas (draft 2020-12; formats such as date-time are checked). */
export function loadValidator(schemaPath) {
  const schema = JSON.parse(readFileSync(schemaPath, "utf-8"));
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  addFormats(ajv);
  return ajv.compile(schema);
}

/** ajv's errors as "field.path: message" strings a person can act on. */
export function describeErrors(errors) {
  return (errors ?? []).map((error) => {
    const where = error.instancePath.slice(1).replaceAll("/", ".") || "<root>";
    const extra = error.params?.additionalProperty ? ` (${error.params.additionalProperty})` : "";
    return `${where}: ${error.message}${extra}`;
  });
}

/**
 * A kafkajs client whose logs go to stderr (stdout carries the JSON output).
 *
 * Settings that matter (both Apache Kafka and the embedded Tansu broker):
 * - no idempotent producer (Tansu fails InitProducerId), acks=-1;
 * - session timeout 6 s / heartbeat 1 s / rebalance timeout 6 s: a group join on Tansu takes about half the
 *   session timeout, so kafkajs' defaults (30 s / 3 s / 60 s) make a subscriber wait ~15 s before its first record;
 *   6 s is also Kafka's default group.min.session.timeout.ms, so the same values work there;
 * - fetch max wait 500 ms instead of 5 s: Tansu holds a fetch for the whole max wait even when records arrive
 *   meanwhile, so with kafkajs' default a new version could take 5 s to reach a subscriber.
 */
export function makeKafka(bootstrap, clientId) {
  return new Kafka({
    clientId,
    brokers: bootstrap.split(","),
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, level, log }) => {
      const { message, ...rest } = log;
      process.stderr.write(`kafkajs ${namespace} level=${level}: ${message} ${JSON.stringify(rest)}\n`);
    },
    retry: { retries: 8 },
  });
}

export const CONSUMER_TIMEOUTS = {
  sessionTimeout: 6000, heartbeatInterval: 1000, rebalanceTimeout: 6000, maxWaitTimeInMs: 500,
};

/**
 * The command line's flags (node:util parseArgs), with --help / -h printing `usage` (exit 0), and an unknown or
 * malformed flag, or `valid(values)` false, printing one line and the usage (exit 64) instead of a stack trace.
 */
export function parseFlags(options, usage, valid = () => true) {
  let values;
  try {
    ({ values } = parseArgs({ options: { ...options, help: { type: "boolean", short: "h" } } }));
  } catch (error) {
    process.stderr.write(`${error.message}\n${usage}\n`);
    process.exit(64);
  }
  if (values.help) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  if (!valid(values)) {
    process.stderr.write(`${usage}\n`);
    process.exit(64);
  }
  return values;
}
