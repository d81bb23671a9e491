// Text in and out, and chat: a model folder with a tokenizer (`parity export builtin:tiny` writes
// the built-in tokenizer) plus a ChatML chat template. Checks, with the openai client: text
// prompts, text and token ids agreeing with /detokenize, stop strings, echo, /tokenize and
// /detokenize, chat completions (streaming and not) equal to `parity generate` of the rendered
// prompt bit for bit, and a template outside the Jinja subset answered with a 400 naming it.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { check, equal, startServer, offline, main, postJson, PARITY } from "./lib.mjs";

const CHATML = "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + " +
  "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

function modelWithTemplate(template) {
  const dir = mkdtempSync(join(tmpdir(), "parity-chat-"));
  execFileSync(PARITY, ["export", "builtin:tiny", "--out", dir], { stdio: "ignore" });
  const cfgPath = join(dir, "tokenizer_config.json");
  const cfg = JSON.parse(readFileSync(cfgPath, "utf8"));
  cfg.chat_template = template;
  writeFileSync(cfgPath, JSON.stringify(cfg, null, 1));
  return dir;
}

await main("text_chat", async () => {
  const dir = modelWithTemplate(CHATML);
  const srv = await startServer(["--exact", "--served-model-name", "tiny-chat"], { model: dir });
  try {
    const client = new OpenAI({ baseURL: srv.url + "/v1", apiKey: "unused", maxRetries: 0 });

    // Text prompt: the response's text is the detokenized tokens (special tokens skipped).
    const r = await client.completions.create({ model: "tiny-chat", prompt: "The quick brown fox", max_tokens: 16,
      temperature: 0.7, seed: 3, return_token_ids: true, ignore_eos: true });
    const c = r.choices[0];
    const tok = await postJson(srv.url + "/tokenize", { prompt: "The quick brown fox" });
    equal(c.prompt_token_ids, tok.json.tokens, "a text prompt is tokenized as /tokenize does");
    equal(tok.json.count, tok.json.tokens.length, "/tokenize counts its tokens");
    const detok = await postJson(srv.url + "/detokenize", { tokens: c.token_ids });
    check(c.text.length > 0, `the completion has text (${JSON.stringify(c.text)})`);
    equal(c.text, detok.json.prompt.replaceAll("<|endoftext|>", ""), "the text is the decoded tokens");
    equal(c.token_ids, offline(dir, { prompt: c.prompt_token_ids, max_tokens: 16, temperature: 0.7, seed: 3 }).tokens,
      "a text prompt's tokens equal parity generate of its ids");

    // Stop string: the text ends before it, finish_reason stop, stop_reason names it.
    const stopStr = c.text.slice(Math.floor(c.text.length / 2), Math.floor(c.text.length / 2) + 2);
    const s = await client.completions.create({ model: "tiny-chat", prompt: "The quick brown fox", max_tokens: 16,
      temperature: 0.7, seed: 3, stop: [stopStr], ignore_eos: true });
    equal([s.choices[0].text, s.choices[0].finish_reason, s.choices[0].stop_reason],
      [c.text.slice(0, c.text.indexOf(stopStr)), "stop", stopStr], `stop string ${JSON.stringify(stopStr)} cuts the text`);
    // Streaming with the stop string: the pieces add up to the same text.
    const st = await client.completions.create({ model: "tiny-chat", prompt: "The quick brown fox", max_tokens: 16,
      temperature: 0.7, seed: 3, stop: [stopStr], ignore_eos: true, stream: true });
    let streamed = "";
    for await (const ch of st) streamed += ch.choices[0]?.text ?? "";
    equal(streamed, s.choices[0].text, "streamed text with a stop string equals the non-streamed text");

    // Echo with logprobs: the prompt comes back first; its first token has no log-prob.
    const e = await client.completions.create({ model: "tiny-chat", prompt: "Hello there", max_tokens: 3, temperature: 0,
      echo: true, logprobs: 1, ignore_eos: true });
    check(e.choices[0].text.startsWith("Hello there"), "echo repeats the prompt");
    const lp = e.choices[0].logprobs;
    equal(lp.token_logprobs.length, tok.json.tokens.length === 0 ? 0 : lp.tokens.length, "one log-prob entry per token");
    check(lp.token_logprobs[0] === null && lp.token_logprobs.slice(1).every((x) => typeof x === "number"),
      "the prompt's first token has a null log-prob, the rest numbers");

    // Chat: rendered with the template, tokens and log-probs equal to parity generate of the rendered prompt.
    const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Say hi." }];
    const ids = (await postJson(srv.url + "/tokenize", { messages })).json.tokens;
    const expected = offline(dir, { prompt: ids, max_tokens: 10, temperature: 0.9, seed: 11, logprobs: 2 });
    const chat = await client.chat.completions.create({ model: "tiny-chat", messages, max_tokens: 10, temperature: 0.9,
      seed: 11, logprobs: true, top_logprobs: 2, ignore_eos: true, return_token_ids: true });
    equal(chat.object, "chat.completion", "chat.completions.create returns a chat.completion");
    equal(chat.choices[0].message.role, "assistant", "the message is the assistant's");
    equal(chat.choices[0].token_ids, expected.tokens, "chat tokens equal parity generate of the rendered prompt");
    equal(chat.choices[0].logprobs.content.map((x) => x.logprob), expected.logprobs.map((x) => x[0][1]),
      "chat log-probs equal the offline run bit for bit");
    equal(chat.usage.prompt_tokens, ids.length, "usage counts the rendered prompt");
    const cs = await client.chat.completions.create({ model: "tiny-chat", messages, max_tokens: 10, temperature: 0.9,
      seed: 11, ignore_eos: true, stream: true });
    let content = "", role = null, finish = null;
    for await (const ch of cs) {
      const d = ch.choices[0];
      if (!d) continue;
      role ??= d.delta.role;
      content += d.delta.content ?? "";
      finish = d.finish_reason ?? finish;
    }
    equal([role, content, finish], ["assistant", chat.choices[0].message.content, "length"],
      "the chat stream gives the role, then the same content");
  } finally {
    await srv.stop();
    rmSync(dir, { recursive: true, force: true });
  }

  // A template outside the subset: a 400 naming the construct.
  const dir2 = modelWithTemplate("{% macro m() %}x{% endmacro %}{{ m() }}");
  const srv2 = await startServer([], { model: dir2 });
  try {
    const client = new OpenAI({ baseURL: srv2.url + "/v1", apiKey: "unused", maxRetries: 0 });
    try {
      await client.chat.completions.create({ model: dir2, messages: [{ role: "user", content: "hi" }] });
      throw new Error("FAILED: an unsupported template rendered");
    } catch (err) {
      check(err.status === 400 && /'macro' tag is not supported/.test(err.message), `a macro in the template: 400 (${err.message})`);
    }
  } finally {
    await srv2.stop();
    rmSync(dir2, { recursive: true, force: true });
  }
});
