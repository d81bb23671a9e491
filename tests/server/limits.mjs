// Limits and lifecycle: a full server answers 503 with Retry-After; a client that disconnects
// mid-stream aborts its request and frees its slot; a body over --max-body-bytes gets 413; bad
// JSON gets 400 with OpenAI's error body; SIGTERM lets an in-flight request finish, then exits 0.
import { check, equal, startServer, main, postJson, getText, metric, waitFor, sleep } from "./lib.mjs";

async function metrics(url) {
  return (await getText(url + "/metrics")).text;
}

await main("limits", async () => {
  // One slot, no queue: the second concurrent request is over the admission bound.
  // A long model length, so the long request is still running (tiny makes ~10k tokens/s) when the others come.
  const srv = await startServer(["--max-num-seqs", "1", "--max-queue", "0", "--max-body-bytes", "2000",
    "--max-model-len", "200000"]);
  try {
    const ctl = new AbortController();
    const long = await fetch(srv.url + "/v1/completions", { method: "POST", signal: ctl.signal,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: [1, 2, 3], max_tokens: 150000, temperature: 0, stream: true, ignore_eos: true }) });
    equal(long.status, 200, "a long streaming request is admitted");
    const reader = long.body.getReader();
    for (let got = 0; got < 3;) got += (await reader.read()).value ? 1 : 0;  // a few events arrived
    const full = await postJson(srv.url + "/v1/completions", { prompt: [1, 2], max_tokens: 2 });
    equal([full.status, full.headers.get("retry-after"), full.json?.error?.type], [503, "1", "service_unavailable"],
      "a request over the admission bound gets 503 with Retry-After");
    equal(metric(await metrics(srv.url), "parity_sequences_running"), 1, "/metrics shows the running sequence");

    ctl.abort();  // the client goes away mid-stream
    await waitFor(async () => metric(await metrics(srv.url), 'parity_sequences_total{outcome="aborted"}') === 1, 10000,
      "the disconnected request to be aborted");
    await waitFor(async () => metric(await metrics(srv.url), "parity_sequences_running") === 0, 5000, "the slot to be freed");
    const after = await postJson(srv.url + "/v1/completions", { prompt: [1, 2], max_tokens: 2, temperature: 0 });
    equal(after.status, 200, "a disconnected client's slot serves the next request");
    const m = await metrics(srv.url);
    check(metric(m, "parity_generation_tokens_total") < 150000, "the aborted request stopped generating early");

    const big = await postJson(srv.url + "/v1/completions", { prompt: Array(1000).fill(1), max_tokens: 2 });
    equal([big.status, big.json?.error?.code], [413, 413], "a body over --max-body-bytes gets 413 with an error body");
    const bad = await postJson(srv.url + "/v1/completions", "{\"prompt\": [1, 2");
    equal([bad.status, bad.json?.error?.type], [400, "invalid_request_error"], "malformed JSON gets 400");
    check(/not valid JSON/.test(bad.json?.error?.message), "the 400 says the body is not valid JSON");
    const neg = await postJson(srv.url + "/v1/completions", { prompt: [1, -2], max_tokens: 2 });
    equal([neg.status, neg.json?.error?.param], [400, "prompt"], "a negative token id gets 400 naming 'prompt'");
    equal((await getText(srv.url + "/health")).status, 200, "the server is still healthy after all that");
  } finally {
    await srv.stop();
  }

  // SIGTERM while a request streams: the stream runs to its end, then the server exits 0.
  const s2 = await startServer(["--max-num-seqs", "2"]);
  const res = await fetch(s2.url + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: [4, 5, 6], max_tokens: 2000, temperature: 0, stream: true, ignore_eos: true }) });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = (await reader.read()).value;  // the stream has started
  s2.proc.kill("SIGTERM");
  for (let r; !(r = await reader.read()).done;) text += r.value;
  check(text.includes('"finish_reason":"length"') && text.trimEnd().endsWith("data: [DONE]"),
    "SIGTERM lets the in-flight stream finish (finish_reason length, [DONE])");
  const { code } = await s2.exited;
  equal(code, 0, "the server exits 0 after draining");
  check(/SIGTERM/.test(s2.log()), "the server logs the graceful shutdown");
});
