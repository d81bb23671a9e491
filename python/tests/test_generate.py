"""LLM.generate: the CLI's `generate`, bit for bit, and exact mode's schedule invariance."""

import json

import pytest

from conftest import ids, read_safetensors, run_cli, same_bits

PROMPT = [5, 17, 301, 44, 9, 120, 77, 3]


def cli_generate(*args):
    return json.loads(run_cli("generate", *args).stdout)


@pytest.mark.parametrize(
    "sampling",
    [
        {"max_tokens": 12, "logprobs": 3},
        {"max_tokens": 12, "temperature": 0.9, "top_k": 40, "top_p": 0.9, "seed": 7, "logprobs": 2},
    ],
)
def test_generate_equals_cli(parity, sampling):
    flag = {"max_tokens": "--max-tokens", "logprobs": "--logprobs", "temperature": "--temperature",
            "top_k": "--top-k", "top_p": "--top-p", "seed": "--seed"}
    args = [a for k, v in sampling.items() for a in (flag[k], v)]
    cli = cli_generate("builtin:tiny-hybrid", "--prompt", ids(PROMPT), "--exact", "--threads", 2, *args)
    llm = parity.LLM("builtin:tiny-hybrid", exact=True, threads=2)
    out = llm.generate(PROMPT, **sampling)
    assert len(out) == 1
    o = out[0]
    assert o.prompt_token_ids == PROMPT
    assert o.token_ids == cli["tokens"] and len(o.token_ids) == 12
    assert o.finish_reason == cli["finish_reason"] == "length"
    # Log-probs equal the CLI's as floats (the CLI prints them with round-trip precision).
    want = [[(e["token"], e["logprob"]) for e in step] for step in cli["logprobs"]]
    assert o.logprobs == want
    assert all(len(step) >= sampling["logprobs"] for step in o.logprobs)


def test_forced_logits_equal_cli_dump_and_score_rows(parity, tmp_path, tiny_exact):
    forced = [11, 12, 13, 14, 15, 16]
    dump = tmp_path / "gen.safetensors"
    run_cli("generate", "builtin:tiny", "--prompt", ids(PROMPT), "--forced", ids(forced), "--exact",
            "--max-num-batched-tokens", 3, "--dump-logits", dump, "--threads", 2)
    cli, _ = read_safetensors(dump)
    o = tiny_exact.generate(PROMPT, forced=forced, return_logits=True)[0]
    assert o.token_ids == forced and o.finish_reason == "forced"
    assert o.logits.shape == (len(forced) + 1, 512)
    assert same_bits(o.logits, cli["logits"])
    # Exact mode: the engine's rows P-1 … P+K-1 are score's rows of the same stream.
    rows = tiny_exact.score(PROMPT + forced)[len(PROMPT) - 1 :]
    assert same_bits(o.logits, rows)


def test_many_prompts_in_one_engine_equal_each_alone(parity):
    # Chunked prefill of several prompts sharing passes (5 tokens a pass, 3 sequences at a time).
    llm = parity.LLM("builtin:tiny", exact=True, max_num_batched_tokens=5, max_num_seqs=3, threads=2)
    alone = parity.LLM("builtin:tiny", exact=True, threads=2)
    prompts = [PROMPT, [1, 2, 3], list(range(40, 70)), [500, 501]]
    together = llm.generate(prompts, max_tokens=6, return_logits=True, logprobs=1)
    assert [o.prompt_token_ids for o in together] == prompts
    for p, o in zip(prompts, together):
        a = alone.generate(p, max_tokens=6, return_logits=True, logprobs=1)[0]
        assert o.token_ids == a.token_ids
        assert same_bits(o.logits, a.logits)
        assert o.logprobs == a.logprobs


def test_forced_one_per_prompt_and_stop(tiny_exact):
    out = tiny_exact.generate([[1, 2], [3, 4, 5]], forced=[[6, 7], [8]])
    assert [o.token_ids for o in out] == [[6, 7], [8]]
    free = tiny_exact.generate(PROMPT, max_tokens=8)[0].token_ids
    stopped = tiny_exact.generate(PROMPT, max_tokens=8, stop_token_ids=[free[2]])[0]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free[: free.index(free[2]) + 1]


def test_calls_from_several_threads_take_turns(tiny_exact):
    # The GIL is released while the engine runs; concurrent calls on one LLM give each call's bits.
    import threading

    want = {i: tiny_exact.score([i + 1, 2, 3, 4]) for i in range(4)}
    got = {}

    def work(i):
        got[i] = tiny_exact.score([i + 1, 2, 3, 4])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(same_bits(got[i], want[i]) for i in range(4))
