// The exact-mode promise over HTTP: many concurrent clients on loopback, a server that mixes
// them into shared passes and cuts prompts at a small token budget, and every response's tokens
// and log-probs equal `parity generate` of the same request alone, bit for bit. Companion: the
// same load on a plain-mode server differs from the plain offline runs somewhere (so the
// comparison can fail), and the comparator flags one changed log-prob.
import { check, equal, canonical, startServer, offline, fromChoice, trimOffline, main, postJson } from "./lib.mjs";

// 24 requests: prompts of 3..45 tokens (every fourth extends the one before), greedy and sampled.
function requests() {
  const out = [];
  let x = 12345;
  const rnd = (m) => (x = (x * 1103515245 + 12345) % 2147483648) % m;
  for (let i = 0; i < 24; i++) {
    const len = 3 + rnd(38);
    let prompt = Array.from({ length: len }, () => 1 + rnd(500));
    if (i % 4 === 3) prompt = [...out[i - 1].prompt, ...prompt.slice(0, 5)];  // shares a prefix (prefix cache)
    const r = { prompt, max_tokens: 4 + rnd(12), temperature: i % 3 === 0 ? 0 : 0.7 + (i % 4) * 0.2, seed: 1000 + i,
      logprobs: 1 + (i % 4) };
    if (i % 5 === 1) r.top_k = 20;
    if (i % 7 === 2) r.top_p = 0.9;
    out.push(r);
  }
  return out;
}

async function fire(url, reqs) {
  // All at once: the server batches them (max-num-seqs 6) and queues the rest.
  return Promise.all(reqs.map(async (r, i) => {
    const stream = i % 2 === 0;
    const body = { model: "builtin:tiny", ...r, stream, ignore_eos: true, return_token_ids: true, return_tokens_as_token_ids: true };
    if (!stream) {
      const res = await postJson(url + "/v1/completions", body);
      if (res.status !== 200) throw new Error(`request ${i}: HTTP ${res.status} ${res.text}`);
      return fromChoice(res.json.choices[0]);
    }
    const res = await fetch(url + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    if (res.status !== 200) throw new Error(`request ${i}: HTTP ${res.status}`);
    const text = await res.text();
    const choice = { token_ids: [], finish_reason: null, logprobs: { token_logprobs: [], top_logprobs: [] } };
    for (const ev of text.split("\n\n")) {
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      for (const c of JSON.parse(ev.slice(6)).choices) {
        choice.token_ids.push(...c.token_ids);
        choice.logprobs.token_logprobs.push(...c.logprobs.token_logprobs);
        choice.logprobs.top_logprobs.push(...c.logprobs.top_logprobs);
        if (c.finish_reason) choice.finish_reason = c.finish_reason;
      }
    }
    return fromChoice(choice);
  }));
}

function mismatches(got, expected) {
  let n = 0;
  for (let i = 0; i < got.length; i++) if (canonical(got[i]) !== canonical(expected[i])) n++;
  return n;
}

// 110 s (under ctest's 120): a hang guard, not a speed check; under the sanitizer build on 2 cores the whole run took 58 s.
await main("exact_concurrency", async () => {
  const reqs = requests();
  // Small token budget and few slots: prompts are cut into chunks and share passes with decodes.
  const flags = ["--max-num-seqs", "6", "--max-num-batched-tokens", "7"];
  // "exact+features": the same with prefix caching and n-gram speculative decoding on in the server
  // only (the offline runs use neither); exact mode promises the same bits.
  const features = ["--enable-prefix-caching", "--prefix-block-tokens", "16", "--speculative-tokens", "2"];
  for (const mode of ["exact", "exact+features", "plain"]) {
    const numerics = mode.startsWith("exact") ? ["--exact"] : [];
    const expected = reqs.map((r) => trimOffline(offline("builtin:tiny", r, numerics), r.logprobs));
    const srv = await startServer([...numerics, ...flags, ...(mode === "exact+features" ? features : [])]);
    let got;
    try {
      got = await fire(srv.url, reqs);
    } finally {
      await srv.stop();
    }
    const bad = mismatches(got, expected);
    if (mode === "exact+features") {
      equal(bad, 0, `exact with prefix caching and speculative decoding: all ${reqs.length} responses equal the offline runs`);
    } else if (mode === "exact") {
      equal(bad, 0, `exact: all ${reqs.length} concurrent responses equal their offline runs bit for bit`);
      // The comparator sees a one-ulp change in one log-prob.
      const changed = JSON.parse(JSON.stringify(got));
      const f = new Float32Array([changed[5].logprobs[1][0][1]]);
      new Uint32Array(f.buffer)[0] += 1;
      changed[5].logprobs[1][0][1] = f[0];
      equal(mismatches(changed, expected), 1, "a log-prob changed by one ulp is detected");
    } else {
      check(bad > 0, `plain: ${bad} of ${reqs.length} responses differ from the plain offline run (chunked prefill ` +
        `at another split), so the exact check can fail`);
    }
  }
}, 110000);
