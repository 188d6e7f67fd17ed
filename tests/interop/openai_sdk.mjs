// The official OpenAI SDK for Node.js as a client of admitd (in front of admit-mock-engine).
// Prints TAP. Environment: ADMITD_URL (http://host:port), ADMITD_METRICS (http://host:port),
// N and Q (admitd's limits), RETRY_AFTER (admitd's --retry-after seconds).
import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';

const base = process.env.ADMITD_URL;
const metricsUrl = process.env.ADMITD_METRICS + '/metrics';
const N = Number(process.env.N);
const Q = Number(process.env.Q);
const RETRY_AFTER = Number(process.env.RETRY_AFTER);
const OVERLOAD = 'Server overloaded: worker at capacity';
const messages = [{ role: 'user', content: 'Say something.' }];

let n = 0;
let failed = 0;
async function check(name, fn) {
  n++;
  try {
    await fn();
    console.log(`ok ${n} - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok ${n} - ${name}`);
    for (const line of String(e && e.stack ? e.stack : e).split('\n')) console.log(`# ${line}`);
  }
}
function assert(cond, what) {
  if (!cond) throw new Error('assertion failed: ' + what);
}

// Each concurrent request carries a marker of its own as X-Request-Id, which the mock engine
// echoes (reply head, completion ids): an answer holding another's marker is cross-talk.
const MARKER_RX = /mk-[A-Za-z0-9]+-[0-9]+-[0-9a-f]{12}/g;
let markerSeq = 0;
function marker() {
  return `mk-sdk-${markerSeq++}-${randomBytes(6).toString('hex')}`;
}
// One answer read whole: its head's X-Request-Id (null if none), status and body text.
function checkOwn(m, { status, requestId, text }) {
  const foreign = (text.match(MARKER_RX) || []).filter((x) => x !== m);
  assert(foreign.length === 0, `${m} received another's marker ${foreign[0]}`);
  assert(requestId === null || requestId === m, `${m} got X-Request-Id ${requestId}`);
  assert(status !== 200 || requestId === m, `a 200 without ${m}'s X-Request-Id`);
  for (const line of text.split('\n')) {
    if (!line.startsWith('data:') || line.slice(5).trim() === '[DONE]') continue;
    const ev = JSON.parse(line.slice(5));
    assert(ev.id === undefined || ev.id === `chatcmpl-${m}`, `${m} got the id ${ev.id}`);
  }
}

async function gauge(name) {
  const text = await (await fetch(metricsUrl)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return Number(line.split(' ')[1]);
}
async function waitFor(pred, what) {
  for (let i = 0; i < 500; i++) {
    if (await pred()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('timed out waiting for ' + what);
}

// Fills all N slots and the Q queue places with long streams, each with its own marker;
// returns a function that releases them, and checks that every answer was its client's own
// (of one aborted after its head, the head and what came of its body).
async function fillGate(maxTokens) {
  const ctl = new AbortController();
  const holders = [];
  for (let i = 0; i < N + Q; i++) {
    const m = marker();
    holders.push(
      fetch(base + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Request-Id': m },
        body: JSON.stringify({ stream: true, max_tokens: maxTokens, messages }),
        signal: ctl.signal,
      })
        .then(async (r) => {
          const got = { m, status: r.status, requestId: r.headers.get('x-request-id'), text: '' };
          try {
            got.text = await r.text();
          } catch {
            got.text = ''; // aborted mid-body: the head is judged alone
          }
          return got;
        })
        .catch(() => null), // aborted before its head
    );
  }
  await waitFor(async () => (await gauge('dynamo_request_queue')) === Q, 'the queue to fill');
  return async () => {
    ctl.abort();
    for (const got of await Promise.all(holders)) if (got) checkOwn(got.m, got);
    await waitFor(async () => (await gauge('dynamo_engine_request')) === 0, 'slots to drain');
  };
}

const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'not-needed', maxRetries: 0 });

await check('chat completion, not streamed', async () => {
  const r = await client.chat.completions.create({ model: 'mock-model', messages, max_tokens: 5 });
  assert(r.object === 'chat.completion', 'object');
  assert(r.choices[0].message.content.length > 0, 'content');
  assert(r.usage.completion_tokens === 5, 'usage.completion_tokens === 5');
});

await check('chat completion, streamed', async () => {
  const stream = await client.chat.completions.create({
    model: 'mock-model', messages, max_tokens: 8, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let chunks = 0;
  let usage = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.choices.length) text += chunk.choices[0].delta.content || '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert(chunks >= 8, `at least 8 chunks (got ${chunks})`);
  assert(text === 'tok0tok1tok2tok3tok4tok5tok6tok7', `the 8 tokens in order (got "${text}")`);
  assert(usage && usage.completion_tokens === 8, 'usage chunk');
});

await check('completion, not streamed and streamed', async () => {
  const r = await client.completions.create({ model: 'mock-model', prompt: 'Once', max_tokens: 3 });
  assert(r.choices[0].text.length > 0 && r.usage.completion_tokens === 3, 'text and usage');
  const stream = await client.completions.create({
    model: 'mock-model', prompt: [1, 2, 3], max_tokens: 4, stream: true,
  });
  let pieces = 0;
  for await (const chunk of stream) if (chunk.choices.length && chunk.choices[0].text) pieces++;
  assert(pieces === 4, `4 text pieces (got ${pieces})`);
});

await check('models list', async () => {
  const page = await client.models.list();
  assert(page.data.length >= 1 && page.data[0].id, 'a model');
});

await check('an overload is an APIError with the overload status and our message', async () => {
  const release = await fillGate(400);
  try {
    let err = null;
    const m = marker();
    try {
      await client.chat.completions.create({ model: 'mock-model', messages, max_tokens: 1 },
        { headers: { 'X-Request-Id': m } });
    } catch (e) {
      err = e;
    }
    assert(err instanceof OpenAI.APIError, 'an APIError was thrown');
    assert(err.status === 529, `status 529 (got ${err.status})`);
    assert(err.error && err.error.message === OVERLOAD, `error.message (got ${JSON.stringify(err.error)})`);
    assert(String(err.message).includes(OVERLOAD), `message (got ${err.message})`);
    assert(err.headers.get('retry-after') === String(RETRY_AFTER), 'Retry-After header');
    checkOwn(m, { status: err.status, requestId: err.headers.get('x-request-id'),
      text: JSON.stringify(err.error) });
  } finally {
    await release();
  }
});

await check("the SDK's retry waits as Retry-After says, then gets in", async () => {
  const attempts = [];
  const recording = new OpenAI({
    baseURL: base + '/v1', apiKey: 'not-needed', maxRetries: 3,
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      attempts.push({ at: performance.now(), status: res.status });
      return res;
    },
  });
  // Holders that finish after about RETRY_AFTER + 1 seconds of tokens.
  const release = await fillGate(60);
  const started = performance.now();
  const m = marker();
  const r = await recording.chat.completions.create({ model: 'mock-model', messages, max_tokens: 1 },
    { headers: { 'X-Request-Id': m } });
  assert(r.choices.length === 1, 'the retried request succeeded');
  assert(r.id === `chatcmpl-${m}`, `its own completion id (got ${r.id})`);
  assert(attempts[0].status === 529, `first attempt rejected (got ${attempts[0].status})`);
  assert(attempts.at(-1).status === 200, 'last attempt admitted');
  for (let i = 1; i < attempts.length; i++) {
    const gap = (attempts[i].at - attempts[i - 1].at) / 1000;
    // The SDK's own backoff starts at 0.5 s; Retry-After asks for RETRY_AFTER seconds.
    assert(gap >= RETRY_AFTER * 0.9, `attempt ${i} came ${gap.toFixed(2)} s after the previous one`);
  }
  console.log(`# ${attempts.length} attempts over ${((performance.now() - started) / 1000).toFixed(2)} s`);
  await release();
});

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
