// Server-sent events as curl sees them: content type, one `data:` line per event, a blank line
// after each, the stream closed by `data: [DONE]`, and the streamed tokens equal the non-streamed
// response of the same seeded request.
import { execFileSync } from "node:child_process";
import { check, equal, startServer, main, postJson } from "./lib.mjs";

await main("sse_curl", async () => {
  const srv = await startServer(["--exact"]);
  try {
    const body = { prompt: [7, 8, 9], max_tokens: 10, temperature: 0.9, seed: 5, stream: true, ignore_eos: true,
      return_token_ids: true };
    const out = execFileSync("curl", ["-sS", "-N", "-D", "-", "-H", "Content-Type: application/json",
      "-d", JSON.stringify(body), srv.url + "/v1/completions"], { timeout: 30000 }).toString();
    const [head, ...rest] = out.split("\r\n\r\n");
    const sse = rest.join("\r\n\r\n");
    check(/content-type: text\/event-stream/i.test(head), "Content-Type is text/event-stream");
    check(/x-accel-buffering: no/i.test(head), "X-Accel-Buffering: no (proxies must not buffer)");
    const events = sse.split("\n\n").filter((e) => e.length);
    check(events.every((e) => e.startsWith("data: ") && !e.slice(6).includes("\n")), "every event is one data: line");
    equal(events[events.length - 1], "data: [DONE]", "the stream ends with data: [DONE]");
    const tokens = events.slice(0, -1).flatMap((e) => JSON.parse(e.slice(6)).choices.flatMap((c) => c.token_ids));
    const plain = await postJson(srv.url + "/v1/completions", { ...body, stream: false });
    equal(tokens, plain.json.choices[0].token_ids, "streamed tokens equal the non-streamed response");
    const text = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices.map((c) => c.text).join("")).join("");
    equal(text, plain.json.choices[0].text, "streamed text pieces add up to the non-streamed text");
    equal(events.length - 1, 10, "one event per generated token");
  } finally {
    await srv.stop();
  }
});
