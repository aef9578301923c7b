'use strict';
// SQL92 and tag subscriptions of the official Node.js client (npm rocketmq-client-nodejs),
// unmodified, against a txmq broker. Run by tests/integration/test_node_sql_filter.py, which
// creates the topic, says what to send and which filters to subscribe with, and checks the JSON
// this script prints as its last line:
//
//     node sql_filter.js ENDPOINTS TOPIC SPEC_JSON
//
// SPEC_JSON: {"messages": [[body, tag, {property: value}]...], "filters": {name: [type, expr]},
// "queues": n, "push": {"filter": expr, "settled": path}, "refusedAtStartup": expr,
// "refusedOnReceive": expr}; type is "sql" or "tag" (a tag filter is given as the plain string the client accepts
// for one). Every wait is bounded.

const fs = require('node:fs');
const {
  Producer, SimpleConsumer, PushConsumer, ConsumeResult, FilterExpression,
} = require('rocketmq-client-nodejs');
// The client does not export FilterType from its index: it comes from its generated protobuf.
const { FilterType } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const STEP_TIMEOUT_MS = 15000;
const AWAIT_MS = 1000;
const POLL_MS = 50;
const [endpoints, topic, rawSpec] = process.argv.slice(2);
const spec = JSON.parse(rawSpec);
const quiet = { info() {}, debug() {}, warn() {}, error() {} };
const clients = [];

function options(extra) {
  return { endpoints, namespace: '', logger: quiet, requestTimeout: 5000, ...extra };
}

function deadline(promise, what) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no result after ${STEP_TIMEOUT_MS} ms`)),
      STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

function consumer(group, subscription) {
  const c = new SimpleConsumer(options({
    consumerGroup: group, awaitDuration: AWAIT_MS,
    subscriptions: new Map([[topic, subscription]]),
  }));
  clients.push(c);
  return c;
}

function subscription([type, expression]) {
  return type === 'sql' ? new FilterExpression(expression, FilterType.SQL) : expression;
}

// Receives and acks until every queue answered empty in a row (receive takes the queues in
// turn), bounded in time; returns what arrived.
async function drain(name, c, queues) {
  const got = [];
  const end = Date.now() + STEP_TIMEOUT_MS;
  let empty = 0;
  while (empty < queues) {
    if (Date.now() > end) throw new Error(`${name}: queues not drained, ${got.length} received`);
    const views = await deadline(c.receive(32, 10000), `${name} receive`);
    empty = views.length === 0 ? empty + 1 : 0;
    for (const view of views) {
      got.push({
        body: view.body.toString(), tag: view.tag ?? null,
        properties: Object.fromEntries(view.properties),
      });
      await deadline(c.ack(view), `${name} ack`);
    }
  }
  return got;
}

function failure(err) {
  const cause = err && err.cause;
  return {
    name: err && err.name, code: err && err.code, message: String(err && err.message || err),
    cause: cause ? { name: cause.name, code: cause.code, message: String(cause.message) } : null,
  };
}

function pushConsumer(group, expression, listener) {
  return new PushConsumer(options({
    consumerGroup: group, messageListener: listener,
    subscriptions: new Map([[topic, new FilterExpression(expression, FilterType.SQL)]]),
  }));
}

// A PushConsumer with spec.push.filter: what its listener got by the time the test saw its
// group settle (lag 0, nothing in flight) and created the file spec.push.settled. It is not
// shut down: its shutdown waits for its long polls, which last what the broker's Settings say
// (20 s), and the process exits instead.
async function push() {
  const bodies = [];
  const c = pushConsumer('node-sql-push', spec.push.filter, {
    async consume(view) {
      bodies.push(view.body.toString());
      return ConsumeResult.SUCCESS;
    },
  });
  await deadline(c.startup(), 'PushConsumer startup');
  const end = Date.now() + STEP_TIMEOUT_MS;
  while (!fs.existsSync(spec.push.settled)) {
    if (Date.now() > end) throw new Error(`PushConsumer: not settled, ${bodies.length} received`);
    await new Promise(resolve => setTimeout(resolve, POLL_MS));
  }
  return bodies;
}

async function refused(c, what) {
  try {
    await deadline(c.startup(), what);
    return { accepted: true };
  } catch (err) {
    return failure(err);
  }
}

async function refusedAtStartup() {
  const simple = consumer('node-sql-bad-start',
    new FilterExpression(spec.refusedAtStartup, FilterType.SQL));
  const pushed = pushConsumer('node-sql-bad-push', spec.refusedAtStartup, {
    async consume() { return ConsumeResult.SUCCESS; },
  });
  return {
    simple: await refused(simple, 'SimpleConsumer startup with a malformed filter'),
    push: await refused(pushed, 'PushConsumer startup with a malformed filter'),
  };
}

async function refusedOnReceive() {
  const c = consumer('node-sql-bad-receive', '*');
  await deadline(c.startup(), 'startup to subscribe later');
  // subscribe() only changes what the next receive sends: no new Settings reach the broker.
  await c.subscribe(topic, new FilterExpression(spec.refusedOnReceive, FilterType.SQL));
  try {
    await deadline(c.receive(32, 10000), 'receive with a malformed filter');
    return { accepted: true };
  } catch (err) {
    return failure(err);
  }
}

async function main() {
  const producer = new Producer(options({ topic }));
  clients.push(producer);
  await deadline(producer.startup(), 'producer startup');
  for (const [body, tag, properties] of spec.messages) {
    await deadline(producer.send({
      topic, tag, body: Buffer.from(body), properties: new Map(Object.entries(properties)),
    }), `send ${body}`);
  }
  const names = Object.keys(spec.filters);
  const consumers = names.map(name => consumer(`node-sql-${name}`,
    subscription(spec.filters[name])));
  await Promise.all(consumers.map((c, i) => deadline(c.startup(), `${names[i]} startup`)));
  const drained = await Promise.all(consumers.map((c, i) => drain(names[i], c, spec.queues)));
  const result = { received: Object.fromEntries(names.map((name, i) => [name, drained[i]])) };
  result.push = await push();
  result.refusedAtStartup = await refusedAtStartup();
  result.refusedOnReceive = await refusedOnReceive();
  return result;
}

main().then(async result => {
  await Promise.allSettled(clients.map(c => deadline(c.shutdown(), 'shutdown')));
  console.log(JSON.stringify(result));
  process.exit(0);
}, err => {
  console.error(`FAILED: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
