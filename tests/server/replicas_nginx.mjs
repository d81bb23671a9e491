// More than one replica: two `parity serve --exact` replicas behind nginx (least_conn, SSE
// unbuffered, passive health checks). Concurrent exact-mode requests through nginx — via the
// openai client and raw SSE — must each equal the offline `parity generate` bit for bit,
// whichever replica served it; both replicas must have served some; after one replica dies,
// nginx sends everything to the other and the answers stay exact.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync, mkdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { check, equal, startServer, offline, fromChoice, trimOffline, main, waitFor, getText } from "./lib.mjs";

const NGINX = "/usr/sbin/nginx";
if (!existsSync(NGINX)) {
  console.log("NOT RUN: nginx is not installed (scripts/setup.sh installs nginx-light)");
  process.exit(77);
}

const freePort = () => new Promise((resolve) => {
  const s = createServer();
  s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
});

function requests(count, salt) {
  return Array.from({ length: count }, (_, i) => ({
    prompt: Array.from({ length: 4 + ((i * 7 + salt) % 19) }, (_, k) => 1 + ((i * 31 + k * 17 + salt) % 500)),
    max_tokens: 6 + (i % 9), temperature: i % 4 === 0 ? 0 : 0.9, top_k: i % 3 === 0 ? 30 : 0, seed: 500 + i + salt,
    logprobs: 2,
  }));
}

async function through(client, r, i) {
  const body = { model: "builtin:tiny", ...r, ignore_eos: true, return_token_ids: true, return_tokens_as_token_ids: true };
  if (i % 2 === 0) {
    const { data, response } = await client.completions.create(body).withResponse();
    return { got: fromChoice(data.choices[0]), upstream: response.headers.get("x-upstream") };
  }
  const { data: stream, response } = await client.completions.create({ ...body, stream: true }).withResponse();
  const choice = { token_ids: [], finish_reason: null, logprobs: { token_logprobs: [], top_logprobs: [] } };
  for await (const chunk of stream)
    for (const c of chunk.choices) {
      choice.token_ids.push(...c.token_ids);
      choice.logprobs.token_logprobs.push(...c.logprobs.token_logprobs);
      choice.logprobs.top_logprobs.push(...c.logprobs.top_logprobs);
      if (c.finish_reason) choice.finish_reason = c.finish_reason;
    }
  return { got: fromChoice(choice), upstream: response.headers.get("x-upstream") };
}

await main("replicas_nginx", async () => {
  const a = await startServer(["--exact", "--max-num-seqs", "3"]);
  const b = await startServer(["--exact", "--max-num-seqs", "3"]);
  const prefix = mkdtempSync(join(tmpdir(), "parity-nginx-"));
  for (const d of ["body", "proxy", "fastcgi", "uwsgi", "scgi"]) mkdirSync(join(prefix, d));
  const port = await freePort();
  const conf = readFileSync(new URL("./nginx.conf.in", import.meta.url), "utf8")
    .replaceAll("@PREFIX@", prefix).replaceAll("@PORT@", String(port))
    .replaceAll("@REPLICA1@", String(a.port)).replaceAll("@REPLICA2@", String(b.port));
  writeFileSync(join(prefix, "nginx.conf"), conf);
  const nginx = spawn(NGINX, ["-p", prefix, "-c", join(prefix, "nginx.conf"), "-e", join(prefix, "error.log")],
    { stdio: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitFor(async () => { try { return (await getText(url + "/health")).status === 200; } catch { return false; } },
      10000, "nginx to come up");
    const client = new OpenAI({ baseURL: url + "/v1", apiKey: "unused", maxRetries: 0 });

    const reqs = requests(16, 0);
    const expected = reqs.map((r) => trimOffline(offline("builtin:tiny", r), r.logprobs));
    const results = await Promise.all(reqs.map((r, i) => through(client, r, i)));
    const served = {};
    let bad = 0;
    results.forEach(({ got, upstream }, i) => {
      served[upstream] = (served[upstream] ?? 0) + 1;
      if (JSON.stringify(got) !== JSON.stringify(expected[i])) bad++;
    });
    equal(bad, 0, `all ${reqs.length} concurrent requests through nginx equal their offline runs bit for bit`);
    const replicas = Object.keys(served).sort();
    equal(replicas, [`127.0.0.1:${a.port}`, `127.0.0.1:${b.port}`].sort(),
      `both replicas served requests (${JSON.stringify(served)})`);

    // SSE through nginx arrives as the tokens are made, not in one buffered block.
    const res = await fetch(url + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: [1, 2, 3], max_tokens: 2000, temperature: 0, stream: true, ignore_eos: true }) });
    const reader = res.body.getReader();
    let reads = 0;
    while (!(await reader.read()).done) reads++;
    check(reads >= 5, `a 2000-token stream through nginx arrives in ${reads} pieces (unbuffered)`);

    // One replica dies: nginx marks it failed and sends everything to the other; still exact.
    a.proc.kill("SIGKILL");
    await a.exited;
    const more = requests(6, 3);
    const expected2 = more.map((r) => trimOffline(offline("builtin:tiny", r), r.logprobs));
    const after = await Promise.all(more.map((r, i) => through(client, r, i)));
    equal(after.map((x) => x.got), expected2, "after one replica died, every answer (from the other) is still exact");
    check(after.every((x) => x.upstream.endsWith(`:${b.port}`)), "the survivor served them all");
  } finally {
    nginx.kill("SIGQUIT");
    await a.stop({ clean: false });  // killed above
    await b.stop();
    rmSync(prefix, { recursive: true, force: true });
  }
});
