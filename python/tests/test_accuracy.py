"""probes, capture and validate: the CLI's commands of the same names."""

import json

import numpy as np
import pytest

from conftest import TEST_DATA, ids, run_cli, same_bits


def test_probes_equal_cli(parity):
    cli = json.loads(run_cli("probes", "builtin:tiny-hybrid", "--json").stdout)
    got = parity.LLM("builtin:tiny-hybrid").probes()
    assert got == cli
    assert got[0]["name"] in ("model.embed_tokens", "backbone.embeddings") and got[-1]["name"] == "lm_head"


@pytest.mark.parametrize("layout", ["flat", "step"])
def test_capture_equals_cli(parity, tmp_path, layout):
    out = tmp_path / "cli.safetensors"
    run_cli("capture", "builtin:tiny", "--prompt", "1,2,3,4", "--prompt", "9,8", "--max-tokens", 3,
            "--modules", "backbone.layers.0-1.mixer", "lm_head", "--layout", layout, "--exact",
            "--out", out, "--threads", 2)
    cli = parity.read_captures(str(out))
    llm = parity.LLM("builtin:tiny", exact=True, threads=2)
    mine_path = tmp_path / "py.safetensors"
    got = llm.capture([[1, 2, 3, 4], [9, 8]], ["backbone.layers.0-1.mixer", "lm_head"], max_tokens=3,
                      layout=layout, out=str(mine_path))
    assert got.layout == cli.layout == layout
    assert got.modules == cli.modules == ["backbone.layers.0.mixer", "backbone.layers.1.mixer", "lm_head"]
    assert got.metadata == cli.metadata
    for g, c in zip(got.prompts, cli.prompts):
        assert g.prompt_token_ids == c.prompt_token_ids
        assert g.continuation_token_ids == c.continuation_token_ids and len(g.continuation_token_ids) == 3
        for m in got.modules:
            assert same_bits(g.tensors[m], c.tensors[m])
        if layout == "step":
            assert len(g.steps["lm_head"]) == 3
    # Written by the module, read back: the same tensors.
    again = parity.read_captures(str(mine_path))
    assert same_bits(again.prompts[1].tensors["lm_head"], got.prompts[1].tensors["lm_head"])


def test_capture_lm_head_rows_are_score_rows(tiny_exact):
    c = tiny_exact.capture([5, 6, 7, 8], ["lm_head"], forced=[9, 10])
    assert same_bits(c.prompts[0].tensors["lm_head"], tiny_exact.score([5, 6, 7, 8, 9, 10]))


def test_validate_against_hugging_face_reference_equals_cli(parity, tmp_path):
    # tests/data/mamba2_g1/hf_captures.safetensors: Hugging Face's float64 logits (tools/capture_hf.py).
    model = TEST_DATA / "mamba2_g1"
    ref = str(model / "hf_captures.safetensors")
    r = parity.LLM(str(model), exact=True, threads=2).validate(ref)
    assert r.passed and bool(r)
    assert r.numerics_difference == ""  # a Hugging Face file records no numerics identity
    assert "PASSED: 48 of 48 tokens" in r.summary
    report = tmp_path / "report.json"
    cli = run_cli("validate", model, "--exact", "--reference", ref, "--json", report, "--threads", 2)
    assert cli.stdout == r.summary
    assert r.report == json.loads(report.read_text())


def test_validate_fails_on_another_models_reference_and_names_numerics(parity, tmp_path):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    exact16 = parity.LLM("builtin:tiny", exact=True, exact_grid=16, threads=2)
    ref = exact16.capture(prompt, ["lm_head"], max_tokens=6)
    r = exact16.validate(ref)
    assert r.passed and r.numerics_difference == ""
    assert "PASSED: 6 of 6 tokens" in r.summary
    # Same model, another exact grid: still within tolerance, and the note says why bits differ.
    r8 = parity.LLM("builtin:tiny", exact=True, threads=2).validate(ref)
    assert r8.passed and "exact_grid" in r8.numerics_difference
    # Another model with the same vocabulary: fails, as `parity validate` exits 1.
    other = parity.LLM("builtin:tiny-g2", exact=True, threads=2).validate(ref, max_tokens=3)
    assert not other.passed and "FAILED" in other.summary
    path = tmp_path / "ref.safetensors"
    ref.save(str(path))
    r = run_cli("validate", "builtin:tiny-g2", "--exact", "--reference", path, "--max-tokens", 3, check=False)
    assert r.returncode == 1 and r.stdout.strip().splitlines()[-1] in other.summary


def test_numpy_outputs_are_owned_copies(tiny_exact):
    a = tiny_exact.score([1, 2, 3])
    a[:] = 0  # writable, and does not touch anything the engine keeps
    assert np.any(tiny_exact.score([1, 2, 3]) != 0)
