// What the Node.js producer and subscriber share: argument parsing, JSON Schema validation, kafkajs settings.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

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
export function makeKafka(bootstrap, clientId, env = process.env) {
  return new Kafka({
    clientId,
    brokers: bootstrap.split(","),
    ...securityConfig(env),
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, level, log }) => {
      const { message, ...rest } = log;
      process.stderr.write(`kafkajs ${namespace} level=${level}: ${message} ${JSON.stringify(rest)}\n`);
    },
    retry: { retries: 8 },
  });
}

/**
 * kafkajs' `ssl` and `sasl` options from the same COMBEE_KAFKA_* variables `combee` reads (docs/broker.md, "TLS and
 * SASL"); none set: plaintext. Secrets come from the environment or files, never from the command line:
 * - COMBEE_KAFKA_SECURITY_PROTOCOL: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL;
 * - COMBEE_KAFKA_SSL_CAFILE (else Node's trust store), COMBEE_KAFKA_SSL_CERTFILE / _KEYFILE / _KEY_PASSWORD (mutual
 *   TLS), COMBEE_KAFKA_SSL_CHECK_HOSTNAME=false to skip the host name check (a test cluster only);
 * - COMBEE_KAFKA_SASL_MECHANISM (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER), COMBEE_KAFKA_SASL_USERNAME,
 *   COMBEE_KAFKA_SASL_PASSWORD or _PASSWORD_FILE; OAUTHBEARER: COMBEE_KAFKA_SASL_OAUTH_TOKEN, _TOKEN_FILE (read at
 *   every connect) or _TOKEN_COMMAND (its stdout, run at every connect).
 */
export function securityConfig(env = process.env) {
  const protocol = (env.COMBEE_KAFKA_SECURITY_PROTOCOL || "PLAINTEXT").toUpperCase();
  if (!["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"].includes(protocol)) {
    throw new Error(`COMBEE_KAFKA_SECURITY_PROTOCOL=${protocol}: use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL`);
  }
  const read = (path) => readFileSync(path, "utf-8");
  const config = {};
  if (protocol === "SSL" || protocol === "SASL_SSL") {
    const ssl = { rejectUnauthorized: true };
    if (env.COMBEE_KAFKA_SSL_CAFILE) ssl.ca = [read(env.COMBEE_KAFKA_SSL_CAFILE)];
    if (env.COMBEE_KAFKA_SSL_CERTFILE) ssl.cert = read(env.COMBEE_KAFKA_SSL_CERTFILE);
    if (env.COMBEE_KAFKA_SSL_KEYFILE) ssl.key = read(env.COMBEE_KAFKA_SSL_KEYFILE);
    if (env.COMBEE_KAFKA_SSL_KEY_PASSWORD) ssl.passphrase = env.COMBEE_KAFKA_SSL_KEY_PASSWORD;
    if ((env.COMBEE_KAFKA_SSL_CHECK_HOSTNAME || "true").toLowerCase() === "false") {
      ssl.checkServerIdentity = () => undefined;  // the CA is still checked
    }
    config.ssl = ssl;
  }
  if (protocol === "SASL_PLAINTEXT" || protocol === "SASL_SSL") {
    const mechanism = (env.COMBEE_KAFKA_SASL_MECHANISM || "").toLowerCase();
    if (mechanism === "oauthbearer") {
      const token = () => env.COMBEE_KAFKA_SASL_OAUTH_TOKEN
        || (env.COMBEE_KAFKA_SASL_OAUTH_TOKEN_FILE && read(env.COMBEE_KAFKA_SASL_OAUTH_TOKEN_FILE).trim())
        || execFileSync("/bin/sh", ["-c", env.COMBEE_KAFKA_SASL_OAUTH_TOKEN_COMMAND], { encoding: "utf-8" }).trim();
      config.sasl = { mechanism, oauthBearerProvider: async () => ({ value: token() }) };
    } else if (["plain", "scram-sha-256", "scram-sha-512"].includes(mechanism)) {
      const password = env.COMBEE_KAFKA_SASL_PASSWORD
        ?? read(env.COMBEE_KAFKA_SASL_PASSWORD_FILE).replace(/\r?\n$/, "");
      config.sasl = { mechanism, username: env.COMBEE_KAFKA_SASL_USERNAME, password };
    } else {
      throw new Error(`${protocol} needs COMBEE_KAFKA_SASL_MECHANISM: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER`);
    }
  }
  return config;
}

export const CONSUMER_TIMEOUTS = {
  sessionTimeout: 6000, heartbeatInterval: 1000, rebalanceTimeout: 6000, maxWaitTimeInMs: 500,
};
