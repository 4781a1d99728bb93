#!/usr/bin/env node
// Drives the official OpenAI SDK (`openai` on npm) unchanged against
// Switchboard's Responses API, and prints what each step got as JSON.
//
//   SWITCHBOARD_TOKEN=<jwt or API key> node openai-responses.mjs <base url> '<script json>'
//
// <base url> is a replica's `/v1`; script: {"urls": [other replicas' /v1, ...],
// "maxRetries"?: n, "steps": [step, ...]}. Each step may carry "on": i (the
// i-th of [<base url>, ...urls]) and "apiKey" (instead of the token). A string
// "$<step>.<path>" anywhere in a step is that step's result at <path>
// (`$0.response.id`). Steps:
//   {"create": {params}}                     responses.create, not streamed
//   {"stream": {params}, "dropAfter"?: n}    responses.create({...params, stream: true});
//                                            with dropAfter, the connection is
//                                            dropped after n events; a stream
//                                            that breaks keeps its events and
//                                            says why in "broken"
//   {"retrieveStream": "<id>", "startingAfter"?: n}
//                                            responses.retrieve(id, {stream: true, starting_after})
//   {"helper": "<id>", "startingAfter"?: n}  responses.stream({response_id, starting_after}):
//                                            its events and finalResponse()
//   {"retrieve": "<id>"}                     responses.retrieve(id)
//   {"poll": "<id>"}                         retrieve until the status is final
//   {"cancel": "<id>"}                       responses.cancel(id)
//   {"delete": "<id>"}                       responses.delete(id)
//   {"inputItems": "<id>", "query"?: {...}}  responses.inputItems.list(id, query): every
//                                            item, the SDK fetching page after page
// Output: {"steps": [{"events"?, "response"?, "error"?: {"class", "status",
// "type", "code", "message"}}], "exchanges": [{"method", "url", "status"}]}.
// A step whose call throws records its error and the script goes on.
import OpenAI from 'openai';

const [baseURL, scriptText] = process.argv.slice(2);
if (!baseURL || !scriptText) {
  console.error('usage: SWITCHBOARD_TOKEN=... node openai-responses.mjs <base url> <script json>');
  process.exit(2);
}
const script = JSON.parse(scriptText);
const urls = [baseURL, ...(script.urls ?? [])];
const exchanges = [];
const recordingFetch = async (url, init) => {
  const response = await fetch(url, init);
  exchanges.push({ method: init?.method ?? 'GET', url: String(url), status: response.status });
  return response;
};
const clients = new Map();
const client = (on, apiKey) => {
  const key = `${on}:${apiKey ?? ''}`;
  if (!clients.has(key)) {
    clients.set(
      key,
      new OpenAI({
        baseURL: urls[on],
        apiKey: apiKey ?? process.env.SWITCHBOARD_TOKEN,
        maxRetries: script.maxRetries ?? 0,
        fetch: recordingFetch,
      }),
    );
  }
  return clients.get(key);
};

const results = [];
const resolve = (value) => {
  if (typeof value === 'string' && /^\$\d+\./.test(value)) {
    const [step, ...path] = value.slice(1).split('.');
    return path.reduce((at, key) => at?.[key], results[Number(step)]);
  }
  if (Array.isArray(value)) return value.map(resolve);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolve(v)]));
  }
  return value;
};

// A stream's events; one that breaks (its replica died) keeps what came,
// with the error as `broken`.
const collect = async (stream, dropAfter) => {
  const events = [];
  try {
    for await (const event of stream) {
      events.push(event);
      if (dropAfter !== undefined && events.length >= dropAfter) {
        stream.controller.abort();
        break;
      }
    }
  } catch (error) {
    return { events, broken: `${error?.constructor?.name}: ${error?.message}` };
  }
  return { events };
};

const run = async (step) => {
  const openai = client(step.on ?? 0, step.apiKey);
  if (step.create) return { response: await openai.responses.create(step.create) };
  if (step.stream) {
    const stream = await openai.responses.create({ ...step.stream, stream: true });
    return await collect(stream, step.dropAfter);
  }
  if (step.retrieveStream) {
    const query = { stream: true };
    if (step.startingAfter !== undefined) query.starting_after = step.startingAfter;
    return await collect(await openai.responses.retrieve(step.retrieveStream, query));
  }
  if (step.helper) {
    const params = { response_id: step.helper };
    if (step.startingAfter !== undefined) params.starting_after = step.startingAfter;
    const stream = openai.responses.stream(params);
    const events = [];
    stream.on('event', (event) => events.push(event));
    const response = await stream.finalResponse();
    return { events, response, outputText: response.output_text };
  }
  if (step.retrieve) return { response: await openai.responses.retrieve(step.retrieve) };
  if (step.poll) {
    for (let i = 0; i < 200; i++) {
      const response = await openai.responses.retrieve(step.poll);
      if (!['queued', 'in_progress'].includes(response.status)) return { response, polls: i + 1 };
      await new Promise((done) => setTimeout(done, 50));
    }
    throw new Error('the response never ended');
  }
  if (step.cancel) return { response: await openai.responses.cancel(step.cancel) };
  if (step.inputItems) {
    const items = [];
    for await (const item of openai.responses.inputItems.list(step.inputItems, step.query ?? {})) items.push(item);
    return { items };
  }
  if (step.delete) return { deleted: (await openai.responses.delete(step.delete)) ?? null };
  throw new Error(`unknown step ${JSON.stringify(step)}`);
};

let failed = false;
for (const raw of script.steps) {
  const step = resolve(raw);
  try {
    results.push(await run(step));
  } catch (error) {
    failed = failed || !raw.expectError;
    results.push({
      error: {
        class: error?.constructor?.name,
        status: error?.status ?? null,
        type: error?.type ?? null,
        code: error?.code ?? null,
        message: String(error?.message ?? error),
      },
    });
  }
}
console.log(JSON.stringify({ steps: results, exchanges }));
process.exit(failed ? 1 : 0);
