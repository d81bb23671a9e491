// Helpers shared by the server tests: start `parity serve` on a free loopback port, run the
// offline `parity generate` of a request, compare results bit for bit, small assertions.
import { spawn, execFileSync } from "node:child_process";

export const PARITY = process.env.PARITY_BIN;
if (!PARITY) throw new Error("PARITY_BIN is not set");

export function check(cond, what) {
  if (!cond) throw new Error("FAILED: " + what);
  console.log("ok   " + what);
}

// JSON with object keys sorted, so key order does not matter.
export function canonical(v) {
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  if (v && typeof v === "object")
    return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
  return JSON.stringify(v);
}

export function equal(a, b, what) {
  const sa = canonical(a), sb = canonical(b);
  if (sa !== sb) throw new Error(`FAILED: ${what}\n  got      ${sa}\n  expected ${sb}`);
  console.log("ok   " + what);
}

// Starts `parity serve MODEL --port 0 ARGS…`; resolves once it prints its port.
export function startServer(args, { env = {}, model = "builtin:tiny" } = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(PARITY, ["serve", model, "--port", "0", ...args], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let err = "";
    const timer = setTimeout(() => reject(new Error("server did not start in 30 s:\n" + err)), 30000);
    proc.stderr.on("data", (d) => {
      err += d.toString();
      const m = err.match(/listening on http:\/\/([0-9.]+):(\d+)/);
      if (m && !proc.started) {
        proc.started = true;
        clearTimeout(timer);
        const url = `http://${m[1]}:${m[2]}`;
        resolve({
          proc,
          port: Number(m[2]),
          url,
          log: () => err,
          exited: new Promise((r) => proc.on("exit", (code, sig) => r({ code, sig }))),
          // SIGTERM, then the exit status; a server that does not exit 0 (a crash, a sanitizer
          // report at exit) fails the test unless `clean` is false.
          async stop({ clean = true } = {}) {
            if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
            const r = await this.exited;
            if (clean && r.code !== 0) throw new Error(`FAILED: the server exited with ${r.code ?? r.sig}:\n` + err.slice(-3000));
            return r;
          },
        });
      }
    });
    proc.on("exit", (code) => {
      if (!proc.started) reject(new Error(`server exited with ${code} before listening:\n` + err));
    });
  });
}

// The offline run of one completions request: `parity generate` with the same sampling.
export function offline(model, req, numerics = ["--exact"]) {
  const args = ["generate", model, "--prompt", req.prompt.join(","), "--max-tokens", String(req.max_tokens),
    "--temperature", String(req.temperature ?? 0), "--seed", String(req.seed ?? 0), ...numerics];
  if (req.top_k && req.top_k > 0) args.push("--top-k", String(req.top_k));
  if (req.top_p !== undefined) args.push("--top-p", String(req.top_p));
  if (req.stop_token_ids?.length) args.push("--stop", req.stop_token_ids.join(","));
  if (req.logprobs !== undefined) args.push("--logprobs", String(Math.max(1, req.logprobs)));
  const out = JSON.parse(execFileSync(PARITY, args, { stdio: ["ignore", "pipe", "ignore"] }).toString());
  return {
    tokens: out.tokens,
    // the chosen token's log-prob, then the top N (generate prints the chosen entry first)
    logprobs: (out.logprobs ?? []).map((e) => e.map((t) => [t.token, t.logprob])),
    finish: out.finish_reason,
  };
}

// tokens + chosen log-probs + top log-probs of a completions choice (return_token_ids,
// return_tokens_as_token_ids), in the offline run's layout. The top entries are a JSON object
// (ordered by key in the response), so both sides list them by token id.
const byId = (a, b) => a[0] - b[0];
export function fromChoice(choice) {
  const lp = choice.logprobs;
  const logprobs = lp
    ? choice.token_ids.map((t, i) => [[t, lp.token_logprobs[i]],
        ...Object.entries(lp.top_logprobs[i]).map(([k, v]) => [Number(k.replace("token_id:", "")), v]).sort(byId)])
    : [];
  return { tokens: choice.token_ids, logprobs, finish: choice.finish_reason };
}

// The offline entry trimmed to what the request asked for: chosen + top N (by id).
export function trimOffline(o, topN) {
  return { tokens: o.tokens, logprobs: o.logprobs.map((e) => [e[0], ...e.slice(1, 1 + topN).sort(byId)]), finish: o.finish };
}

export async function getText(url, opts = {}) {
  const r = await fetch(url, opts);
  return { status: r.status, headers: r.headers, text: await r.text() };
}

export async function postJson(url, body, headers = {}) {
  const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

export function metric(text, name) {
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : NaN;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(pred, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return true;
    await sleep(50);
  }
  throw new Error("FAILED: timed out waiting for " + what);
}

// Runs a named test with a wall-clock bound; exits non-zero on failure.
export async function main(name, fn, limitMs = 55000) {
  const t = setTimeout(() => { console.error(`FAILED: ${name} ran past ${limitMs / 1000} s`); process.exit(1); }, limitMs);
  try {
    await fn();
    console.log(`PASSED ${name}`);
    clearTimeout(t);
    process.exit(0);
  } catch (e) {
    console.error(e.stack || String(e));
    process.exit(1);
  }
}
