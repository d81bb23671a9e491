#!/usr/bin/env node
// Load test for `parity serve`: N concurrent streaming clients on loopback, bounded in request
// count and time. For each concurrency level it reports requests/s, generated tokens/s, time to
// first token and inter-token latency (p50 / p99), and checks that no request was lost or
// duplicated (every request ends with one [DONE], carries exactly max_tokens tokens, and no response
// id repeats) and that nothing failed below the admission bound (503s above it are counted apart).
//
//   node tools/serve_load.mjs --parity build/parity --model builtin:mamba2-130m \
//       [--concurrency 1,4,16,64] [--requests-per-client 4] [--prompt-len 32] [--max-tokens 32] \
//       [--server-args "--exact --max-num-seqs 16 --max-queue 64"] [--max-seconds 120] [--url URL]
// With --url it drives a running server instead of starting one.
import { spawn } from "node:child_process";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const concurrencies = (args.concurrency ?? "1,4,16,64").split(",").map(Number);
const perClient = Number(args["requests-per-client"] ?? 4);
const promptLen = Number(args["prompt-len"] ?? 32);
const maxTokens = Number(args["max-tokens"] ?? 32);
const maxSeconds = Number(args["max-seconds"] ?? 120);
const model = args.model ?? "builtin:tiny";

function startServer() {
  return new Promise((resolve, reject) => {
    const extra = (args["server-args"] ?? "--exact --max-num-seqs 16 --max-queue 64").split(" ").filter(Boolean);
    const proc = spawn(args.parity ?? "build/parity", ["serve", model, "--port", "0", ...extra], { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    proc.stderr.on("data", (d) => {
      err += d;
      const m = err.match(/listening on (http:\/\/[0-9.]+:\d+)/);
      if (m) resolve({ url: m[1], proc });
    });
    proc.on("exit", (c) => reject(new Error(`server exited (${c}):\n${err}`)));
  });
}

const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

let rng = 42;
const rand = (m) => (rng = (rng * 1103515245 + 12345) % 2147483648) % m;

async function one(url, i) {
  const body = { model, prompt: Array.from({ length: promptLen }, () => 1 + rand(400)), max_tokens: maxTokens,
    temperature: 0.8, seed: i, stream: true, ignore_eos: true, return_token_ids: true };
  const t0 = performance.now();
  const res = await fetch(url + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body) });
  if (res.status !== 200) {
    await res.text();
    return { status: res.status };
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "", id = null, tokens = 0, done = 0, first = null, last = null;
  const gaps = [];
  for (;;) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buf += value;
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith("data: ")) continue;
      if (ev === "data: [DONE]") { done++; continue; }
      const chunk = JSON.parse(ev.slice(6));
      id = chunk.id;
      const n = chunk.choices.reduce((s, c) => s + (c.token_ids?.length ?? 0), 0);
      if (!n) continue;
      const now = performance.now();
      if (first === null) first = now - t0;
      else gaps.push((now - last) / n);
      last = now;
      tokens += n;
    }
  }
  return { status: 200, id, tokens, done, ttft: first, gaps, total: performance.now() - t0 };
}

async function level(url, c, deadline) {
  const results = [];
  let next = 0;
  const total = c * perClient;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < total && performance.now() < deadline) results.push(await one(url, next++));
  }));
  const secs = (performance.now() - t0) / 1000;
  const ok = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status === 503).length;
  const errors = results.length - ok.length - refused;
  const ids = new Set(ok.map((r) => r.id));
  const lost = ok.filter((r) => r.tokens !== maxTokens || r.done !== 1).length;
  return {
    concurrency: c, requests: results.length, seconds: secs, rps: ok.length / secs,
    tokens_per_s: ok.reduce((s, r) => s + r.tokens, 0) / secs,
    ttft_p50: pct(ok.map((r) => r.ttft), 50), ttft_p99: pct(ok.map((r) => r.ttft), 99),
    itl_p50: pct(ok.flatMap((r) => r.gaps), 50), itl_p99: pct(ok.flatMap((r) => r.gaps), 99),
    lost, duplicated: ok.length - ids.size, errors, refused_503: refused,
  };
}

const server = args.url ? { url: args.url } : await startServer();
const deadline = performance.now() + maxSeconds * 1000;
const rows = [];
try {
  await one(server.url, -1);  // warm-up
  for (const c of concurrencies) {
    if (performance.now() >= deadline) break;
    const r = await level(server.url, c, deadline);
    rows.push(r);
    console.error(JSON.stringify(r));
  }
} finally {
  server.proc?.kill("SIGTERM");
}
const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "–");
console.log(`model ${model}, prompt ${promptLen} tokens, max_tokens ${maxTokens}, ${perClient} requests per client`);
console.log("| clients | requests | req/s | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | lost | duplicated | errors | 503 |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of rows)
  console.log(`| ${r.concurrency} | ${r.requests} | ${f(r.rps, 2)} | ${f(r.tokens_per_s, 0)} | ${f(r.ttft_p50)} | ${f(r.ttft_p99)} | ` +
    `${f(r.itl_p50, 2)} | ${f(r.itl_p99, 2)} | ${r.lost} | ${r.duplicated} | ${r.errors} | ${r.refused_503} |`);
const bad = rows.some((r) => r.lost || r.duplicated || r.errors);
process.exit(bad ? 1 : 0);
