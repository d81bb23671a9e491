"""tensor_parallel_size=: the CLI's --tensor-parallel-size, bit for bit, within tolerance of one rank, and
refused where it would cut a Mamba group (docs/tensor-parallel.md)."""

import numpy as np
import pytest

from conftest import ids, read_safetensors, run_cli, same_bits

TOKENS = [(7 * i + 3) % 512 for i in range(40)]


def test_tensor_parallel_score_equals_cli_and_stays_near_one_rank(parity, tmp_path):
    out = tmp_path / "score.safetensors"
    run_cli("score", "builtin:tiny-g2", "--tokens", ids(TOKENS), "--out", out, "--exact",
            "--tensor-parallel-size", 2)
    cli, _ = read_safetensors(out)
    two = parity.LLM("builtin:tiny-g2", exact=True, tensor_parallel_size=2).score(TOKENS)
    assert same_bits(two, cli["logits"])
    one = parity.LLM("builtin:tiny-g2", exact=True).score(TOKENS)
    assert np.abs(two - one).max() <= 1e-4


def test_a_split_that_cuts_a_group_is_refused(parity):
    with pytest.raises(parity.Error, match="n_groups = 1 is not a multiple of 2"):
        parity.LLM("builtin:tiny", tensor_parallel_size=2)
