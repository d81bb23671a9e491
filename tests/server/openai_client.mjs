// The official openai npm client against `parity serve builtin:tiny --exact`: model list,
// completions (token-id prompts, non-streaming and streaming) equal to the offline
// `parity generate`, errors surfacing as the client's typed errors, and --api-key.
import OpenAI from "openai";
import { check, equal, startServer, offline, fromChoice, trimOffline, main, getText } from "./lib.mjs";

await main("openai_client", async () => {
  const srv = await startServer(["--exact"]);
  try {
    const client = new OpenAI({ baseURL: srv.url + "/v1", apiKey: "unused", maxRetries: 0 });

    const models = await client.models.list();
    equal(models.data.map((m) => m.id), ["builtin:tiny"], "models.list names the served model");

    // ignore_eos: parity generate does not stop at the tokenizer's end-of-sequence token.
    const req = { prompt: [5, 6, 7, 8], max_tokens: 12, temperature: 0.8, top_k: 40, seed: 1234, logprobs: 3, ignore_eos: true };
    const expected = trimOffline(offline("builtin:tiny", req), 3);
    const res = await client.completions.create({ model: "builtin:tiny", ...req, return_token_ids: true,
      return_tokens_as_token_ids: true });
    equal(res.object, "text_completion", "completions.create returns a text_completion");
    equal(fromChoice(res.choices[0]), expected, "non-streaming tokens and log-probs equal parity generate bit for bit");
    equal(res.usage, { prompt_tokens: 4, completion_tokens: 12, total_tokens: 16 }, "usage counts prompt and completion");

    const stream = await client.completions.create({ model: "builtin:tiny", ...req, stream: true,
      stream_options: { include_usage: true }, return_token_ids: true, return_tokens_as_token_ids: true });
    const tokens = [], lps = [];
    let finish = null, usage = null, chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        tokens.push(...c.token_ids);
        if (c.logprobs) lps.push(...c.logprobs.token_logprobs);
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    check(chunks >= 12, `the stream arrives token by token (${chunks} chunks)`);
    equal({ tokens, finish }, { tokens: expected.tokens, finish: expected.finish }, "streamed tokens equal the offline run");
    equal(lps, expected.logprobs.map((e) => e[0][1]), "streamed log-probs equal the offline run bit for bit");
    equal(usage?.completion_tokens, 12, "include_usage sends a final usage chunk");

    // n > 1: choice i samples with seed + i.
    const two = await client.completions.create({ model: "builtin:tiny", prompt: [9, 10], max_tokens: 6, temperature: 1,
      seed: 77, n: 2, ignore_eos: true, return_token_ids: true });
    for (let i = 0; i < 2; i++)
      equal(two.choices[i].token_ids, offline("builtin:tiny", { prompt: [9, 10], max_tokens: 6, temperature: 1, seed: 77 + i }).tokens,
        `n=2: choice ${i} equals parity generate --seed ${77 + i}`);

    // A list of prompts: one choice per prompt, in order.
    const multi = await client.completions.create({ model: "builtin:tiny", prompt: [[1, 2], [3, 4, 5]], max_tokens: 3,
      temperature: 0, return_token_ids: true });
    equal(multi.choices.map((c) => c.prompt_token_ids), [[1, 2], [3, 4, 5]], "a list of prompts gives one choice each");

    // Stop token ids end the choice with finish_reason "stop".
    const stopAt = expected.tokens[2];
    const stopped = await client.completions.create({ model: "builtin:tiny", ...req, stop_token_ids: [stopAt], return_token_ids: true });
    const cut = expected.tokens.indexOf(stopAt) + 1;
    equal([stopped.choices[0].token_ids, stopped.choices[0].finish_reason], [expected.tokens.slice(0, cut), "stop"],
      "stop_token_ids end the choice at the stop token");

    // Errors arrive as the client's typed errors with OpenAI's body.
    const fails = async (p, Cls, status, needle, what) => {
      try {
        await p;
      } catch (e) {
        check(e instanceof Cls && e.status === status && String(e.message).includes(needle),
          `${what}: ${Cls.name} ${status} (${e.message})`);
        return;
      }
      throw new Error("FAILED: " + what + ": no error");
    };
    await fails(client.completions.create({ model: "builtin:tiny", prompt: [1, 99999], max_tokens: 2 }),
      OpenAI.BadRequestError, 400, "outside the vocabulary", "an out-of-vocabulary id");
    await fails(client.completions.create({ model: "builtin:tiny", prompt: [1, 2], max_tokens: 5000 }),
      OpenAI.BadRequestError, 400, "maximum context length", "max_tokens past the model's limit");
    await fails(client.completions.create({ model: "builtin:tiny", prompt: [1, 2], max_tokens: "3" }),
      OpenAI.BadRequestError, 400, "must be an integer", "a wrongly typed field");
    await fails(client.completions.create({ model: "other-model", prompt: [1, 2] }),
      OpenAI.NotFoundError, 404, "does not exist", "another model's name");
    await fails(client.chat.completions.create({ model: "builtin:tiny", messages: [{ role: "user", content: "hi" }] }),
      OpenAI.BadRequestError, 400, "no chat_template", "chat on a model whose tokenizer has no chat template");
  } finally {
    const { code } = await srv.stop();
    equal(code, 0, "SIGTERM stops the server with status 0");
  }

  // --api-key: 401 without the key (the client's AuthenticationError), /health stays open.
  const keyed = await startServer(["--api-key", "s3cret"]);
  try {
    const bad = new OpenAI({ baseURL: keyed.url + "/v1", apiKey: "wrong", maxRetries: 0 });
    try {
      await bad.models.list();
      throw new Error("FAILED: a wrong key was accepted");
    } catch (e) {
      check(e instanceof OpenAI.AuthenticationError && e.status === 401, "a wrong API key gets 401 AuthenticationError");
    }
    const good = new OpenAI({ baseURL: keyed.url + "/v1", apiKey: "s3cret", maxRetries: 0 });
    const r = await good.completions.create({ model: "builtin:tiny", prompt: [1, 2, 3], max_tokens: 2, temperature: 0 });
    equal(r.choices.length, 1, "the right API key is accepted");
    equal((await getText(keyed.url + "/health")).status, 200, "/health needs no key");
    equal((await getText(keyed.url + "/metrics")).status, 401, "/metrics needs the key");
  } finally {
    await keyed.stop();
  }
  const envKeyed = await startServer([], { env: { PARITY_API_KEY: "from-env" } });
  try {
    equal((await getText(envKeyed.url + "/v1/models")).status, 401, "PARITY_API_KEY turns authentication on");
    equal((await getText(envKeyed.url + "/v1/models", { headers: { Authorization: "Bearer from-env" } })).status, 200,
      "PARITY_API_KEY's key is accepted");
  } finally {
    await envKeyed.stop();
  }
});
