'use strict';
// The official Node.js client, unmodified, against a txmq broker with TLS and an ACL file.
// Run by tests/integration/test_security_clients.py (the CA comes from gRPC's standard
// GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), which checks the JSON line this script prints:
//
//     node secure.js ENDPOINTS TOPIC GROUP CREDENTIALS_JSON
//
// CREDENTIALS_JSON: {"producer": [key, secret], "consumer": [key, secret], "wrong": [key, secret]}.
// Every wait is bounded.

const { Producer, SimpleConsumer, FilterExpression } = require('rocketmq-client-nodejs');

const STEP_TIMEOUT_MS = 40000;
const [endpoints, topic, group, rawCredentials] = process.argv.slice(2);
const credentials = JSON.parse(rawCredentials);
const quiet = { info() {}, debug() {}, warn() {}, error() {} };

function options(who, extra) {
  const [accessKey, accessSecret] = credentials[who];
  return {
    endpoints, namespace: '', logger: quiet, requestTimeout: 5000, sslEnabled: true,
    sessionCredentials: { accessKey, accessSecret }, ...extra,
  };
}

function deadline(promise, what) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no result after ${STEP_TIMEOUT_MS} ms`)),
      STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

async function refusal(promise) {
  try {
    await promise;
    return 'accepted';
  } catch (err) {
    return String(err && err.message || err).slice(0, 300);
  }
}

async function main() {
  const result = {};
  const producer = new Producer(options('producer', { topic }));
  await deadline(producer.startup(), 'producer startup');
  const sent = await deadline(producer.send({ topic, body: Buffer.from('from-node') }), 'send');
  result.sent = sent.messageId;
  await producer.shutdown();

  const wrong = new Producer(options('wrong', { topic, maxAttempts: 1 }));
  result.wrongSecret = await refusal(deadline(
    wrong.startup().then(() => wrong.send({ topic, body: Buffer.from('never') })),
    'wrong secret'));

  const consumer = new SimpleConsumer(options('consumer', {
    consumerGroup: group, subscriptions: new Map([[topic, FilterExpression.SUB_ALL]]),
    awaitDuration: 2000,
  }));
  await deadline(consumer.startup(), 'consumer startup');
  const end = Date.now() + STEP_TIMEOUT_MS;
  result.received = [];
  while (!result.received.includes('from-node') && Date.now() < end) {
    for (const view of await consumer.receive(16, 10000)) {
      result.received.push(view.body.toString());
      await consumer.ack(view);
    }
  }
  await consumer.shutdown();
  console.log(JSON.stringify(result));
  process.exit(0);
}

main().catch(err => {
  console.error(err && err.stack || err);
  process.exit(1);
});
