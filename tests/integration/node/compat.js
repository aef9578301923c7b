'use strict';
// The official Node.js client (npm rocketmq-client-nodejs), unmodified, against a txmq broker.
// Run by tests/integration/test_node_client.py, which creates the topics and checks the JSON
// this script prints as its last line:
//
//     node compat.js ENDPOINTS TOPICS_JSON
//
// Every wait is bounded (deadline() below); a step that times out fails the whole run with the
// step's name. Every MessageView the client hands over (consumers and the transaction checker)
// is counted, and the corrupted ones listed.

const util = require('node:util');
const {
  Producer, SimpleConsumer, PushConsumer, ConsumeResult, FilterExpression,
} = require('rocketmq-client-nodejs');
const {
  TransactionResolution,
} = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const STEP_TIMEOUT_MS = 40000;
const POLL_MS = 100;
const endpoints = process.argv[2];
const T = JSON.parse(process.argv[3]);
const views = { count: 0, corrupted: [] };
const clientErrors = [];
const clients = [];

const logger = {
  info() {},
  debug() {},
  warn() {},
  error(...args) { clientErrors.push(util.format(...args).slice(0, 300)); },
};

function note(view) {
  views.count += 1;
  if (view.corrupted) views.corrupted.push(`${view.topic}:${view.messageId}`);
}

function deadline(promise, what, ms = STEP_TIMEOUT_MS) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no result after ${ms} ms`)), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

async function until(condition, what, ms = STEP_TIMEOUT_MS) {
  const end = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > end) {
      throw new Error(`${typeof what === 'function' ? what() : what}: not reached after ${ms} ms`);
    }
    await new Promise(resolve => setTimeout(resolve, POLL_MS));
  }
}

async function started(client, what) {
  clients.push(client);
  const begin = Date.now();
  await deadline(client.startup(), `${what} startup`);
  return Date.now() - begin;
}

function options(extra) {
  return { endpoints, namespace: '', logger, requestTimeout: 5000, ...extra };
}

// Receives until `want` messages arrived (acking none), bounded in time.
async function receiveAtLeast(consumer, want, what) {
  const got = [];
  const end = Date.now() + STEP_TIMEOUT_MS;
  while (got.length < want) {
    if (Date.now() > end) throw new Error(`${what}: ${got.length} of ${want} messages`);
    for (const view of await consumer.receive(16, 10000)) {
      note(view);
      got.push(view);
    }
  }
  return got;
}

async function produce(producer) {
  const receipts = [];
  for (const [i, tag] of ['A', 'B', 'C', 'A'].entries()) {
    const body = Buffer.from(`${tag}${i}`);
    receipts.push(await producer.send({ topic: T.normal, tag, keys: [`key-${i}`], body }));
  }
  for (let i = 0; i < 5; i += 1) {
    await producer.send({ topic: T.fifo, messageGroup: 'g1', body: Buffer.from(`f${i}`) });
  }
  const delaySentAt = Date.now();
  await producer.send({ topic: T.delay, delay: 2000, body: Buffer.from('later') });
  return { messageIds: receipts.map(r => r.messageId), delaySentAt };
}

async function transactions() {
  const checked = [];
  const checker = {
    async check(view) {
      note(view);
      const body = view.body.toString();
      checked.push(body);
      return body.startsWith('commit')
        ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
    },
  };
  const producer = new Producer(options({ topic: T.txn, checker }));
  await started(producer, 'transactional Producer');
  for (const [body, decide] of [['tx-commit', 'commit'], ['tx-rollback', 'rollback'],
    ['commit-by-check', null], ['rollback-by-check', null]]) {
    const tx = producer.beginTransaction();
    await producer.send({ topic: T.txn, body: Buffer.from(body) }, tx);
    if (decide === 'commit') await tx.commit();
    if (decide === 'rollback') await tx.rollback();
  }
  await until(() => checked.includes('commit-by-check') && checked.includes('rollback-by-check'),
    'check-back of both undecided transactions');
  const consumer = new SimpleConsumer(options({
    consumerGroup: 'node-txn', subscriptions: new Map([[T.txn, FilterExpression.SUB_ALL]]),
    awaitDuration: 1000,
  }));
  await started(consumer, 'SimpleConsumer (transactions)');
  const got = await receiveAtLeast(consumer, 2, 'committed transactional messages');
  for (const view of got) await consumer.ack(view);
  // Rolled-back halves never show up: the queues stay empty for a full receive round.
  const more = [...await consumer.receive(16, 10000), ...await consumer.receive(16, 10000)];
  return {
    checked: [...new Set(checked)].sort(),
    received: got.concat(more).map(v => v.body.toString()).sort(),
  };
}

async function simpleTagsAndInvisibility() {
  const consumer = new SimpleConsumer(options({
    consumerGroup: 'node-simple', awaitDuration: 1000,
    subscriptions: new Map([[T.normal, new FilterExpression('A||B')]]),
  }));
  await started(consumer, 'SimpleConsumer (tags)');
  const got = await receiveAtLeast(consumer, 3, 'tag-filtered messages');
  const [first, ...rest] = got;
  for (const view of rest) await consumer.ack(view);
  await consumer.changeInvisibleDuration(first, 1000);
  const again = await receiveAtLeast(consumer, 1, 'message back after changeInvisibleDuration');
  for (const view of again) await consumer.ack(view);
  return {
    bodies: got.map(v => v.body.toString()).sort(),
    tags: [...new Set(got.map(v => v.tag))].sort(),
    keys: got.map(v => v.keys.join(',')).sort(),
    redelivered: again.map(v => [v.body.toString(), v.deliveryAttempt]),
    first: first.body.toString(),
  };
}

async function simpleFifoAndDelay(delaySentAt) {
  const fifo = new SimpleConsumer(options({
    consumerGroup: 'node-fifo', awaitDuration: 1000,
    subscriptions: new Map([[T.fifo, FilterExpression.SUB_ALL]]),
  }));
  await started(fifo, 'SimpleConsumer (FIFO)');
  const order = [];
  const end = Date.now() + STEP_TIMEOUT_MS;
  while (order.length < 5 && Date.now() < end) {
    for (const view of await fifo.receive(16, 10000)) {
      note(view);
      order.push(view.body.toString());
      await fifo.ack(view);
    }
  }
  const delayed = new SimpleConsumer(options({
    consumerGroup: 'node-delay', awaitDuration: 1000,
    subscriptions: new Map([[T.delay, FilterExpression.SUB_ALL]]),
  }));
  await started(delayed, 'SimpleConsumer (delay)');
  const [view] = await receiveAtLeast(delayed, 1, 'the delay message');
  await delayed.ack(view);
  return { fifoOrder: order, delayWaitedMs: Date.now() - delaySentAt, delayBody: view.body.toString() };
}

async function push(producer) {
  const attempts = new Map();
  const done = [];
  const fifoDone = [];
  const listener = (finished, failFirst) => ({
    consume(view) {
      note(view);
      const body = view.body.toString();
      const n = (attempts.get(body) || 0) + 1;
      attempts.set(body, n);
      if (failFirst(body) && n === 1) return ConsumeResult.FAILURE;
      finished.push([body, view.deliveryAttempt]);
      return ConsumeResult.SUCCESS;
    },
  });
  const normal = new PushConsumer(options({
    consumerGroup: 'node-push', subscriptions: new Map([[T.push, FilterExpression.SUB_ALL]]),
    messageListener: listener(done, () => true),
  }));
  const fifo = new PushConsumer(options({
    consumerGroup: 'node-push-fifo',
    subscriptions: new Map([[T.pushFifo, FilterExpression.SUB_ALL]]),
    messageListener: listener(fifoDone, body => body === 'q1'),
  }));
  await started(normal, 'PushConsumer');
  await started(fifo, 'PushConsumer (FIFO)');
  for (let i = 0; i < 4; i += 1) {
    await producer.send({ topic: T.push, body: Buffer.from(`p${i}`) });
    await producer.send({ topic: T.pushFifo, messageGroup: 'g', body: Buffer.from(`q${i}`) });
  }
  await until(() => done.length >= 4 && fifoDone.length >= 4,
    () => `push consumers finishing (done ${JSON.stringify(done)}, FIFO ${JSON.stringify(fifoDone)},`
      + ` attempts ${JSON.stringify([...attempts])})`);
  return { normal: done.sort(), fifo: fifoDone };
}

async function main() {
  // Several topics declared at construction: the startup that used to hang.
  const producer = new Producer(options({ topic: [T.normal, T.fifo, T.delay, T.push, T.pushFifo] }));
  const startupMs = await started(producer, 'Producer with five topics');
  const sent = await produce(producer);
  const result = { startupMs, sent: sent.messageIds.length };
  result.simple = await simpleTagsAndInvisibility();
  result.fifoDelay = await simpleFifoAndDelay(sent.delaySentAt);
  result.txn = await transactions();
  result.push = await push(producer);
  result.views = views.count;
  result.corrupted = views.corrupted;
  return result;
}

main().then(async result => {
  await Promise.allSettled(clients.map(c => deadline(c.shutdown(), 'shutdown', 10000)));
  console.log(JSON.stringify(result));
  process.exit(0);
}, err => {
  console.error(`FAILED: ${err && err.stack ? err.stack : err}`);
  console.error(`client errors (last 10): ${clientErrors.slice(-10).join('\n')}`);
  process.exit(1);
});
