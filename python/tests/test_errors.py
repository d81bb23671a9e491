"""Bad input raises parity.Error naming the problem, as the CLI prints it; nothing crashes."""

import shutil

import numpy as np
import pytest

from conftest import TEST_DATA


def test_error_is_a_runtime_error(parity):
    assert issubclass(parity.Error, RuntimeError)


@pytest.mark.parametrize(
    "model,message",
    [
        ("/nonexistent/folder", "is neither a checkpoint folder nor builtin:NAME"),
        ("builtin:nope", "builtin"),
    ],
)
def test_bad_model(parity, model, message):
    with pytest.raises(parity.Error, match=message):
        parity.LLM(model)


def test_broken_checkpoint(parity, tmp_path):
    shutil.copy(TEST_DATA / "mamba2_g1" / "model.safetensors", tmp_path)
    (tmp_path / "config.json").write_text('{"architectures": ["Mamba2ForCausalLM"], "hidden_size": 1e400}')
    with pytest.raises(parity.Error, match="outside the range of a double"):
        parity.LLM(str(tmp_path))
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    with pytest.raises(parity.Error, match="unknown architecture 'LlamaForCausalLM'"):
        parity.LLM(str(tmp_path))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"exact_grid": 16}, "add --exact"),
        ({"exact": True, "exact_grid": 12}, "exact-grid"),
        ({"mamba_ssm_cache_dtype": "float16"}, "float32 or bfloat16"),
        ({"exact": True, "exact_stagger": "diagonal"}, "diagonal"),
        ({"scan_products": "bfloat16"}, "add --exact"),
        ({"exact": True, "scan_products": "fp16"}, "float32, bfloat16 or split"),
        ({"exact": True, "scan_products": "split"}, "fp32 only"),
        ({"moe_routing": "sideways"}, "sideways"),
        ({"additional_config": "{not json"}, "not valid JSON"),
        ({"additional_config": {"tensor_replacement": 3}}, "tensor_replacement"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_options(parity, kwargs, message):
    with pytest.raises(parity.Error, match=message):
        parity.LLM("builtin:tiny", **kwargs)


def test_gpu_memory_share_needs_a_gpu(parity):
    with pytest.raises(parity.Error, match=r"runs on cpu \(use --state-memory-mb\)"):
        parity.LLM("builtin:tiny", gpu_memory_utilization=0.9).generate([1, 2], max_tokens=1)
    with pytest.raises(parity.Error, match=r"must be in \(0, 1\]"):
        parity.LLM("builtin:tiny", gpu_memory_utilization=1.5).generate([1, 2], max_tokens=1)


def test_token_out_of_range(tiny_exact, parity):
    with pytest.raises(parity.Error, match=r"token id 512 .*outside the vocabulary \[0, 512\)"):
        tiny_exact.score([1, 512])
    with pytest.raises(parity.Error, match="outside the vocabulary"):
        tiny_exact.generate([1, 2, 99999], max_tokens=2)
    with pytest.raises(parity.Error, match=r"element 1 = -3 is not a token id"):
        tiny_exact.score([1, -3])
    with pytest.raises(parity.Error, match=r"element 0 = 4294967296 is not a token id"):
        tiny_exact.score([2**32])


def test_bad_token_lists(tiny_exact, parity):
    with pytest.raises(parity.Error, match="got bytes"):
        tiny_exact.score(b"hello")
    with pytest.raises(parity.Error, match="the text encodes to no tokens"):
        tiny_exact.score("")
    with pytest.raises(parity.Error, match="not an integer"):
        tiny_exact.score([1, 2.5])
    with pytest.raises(parity.Error, match="token list is empty"):
        tiny_exact.score([])
    with pytest.raises(parity.Error, match="the prompt is empty"):
        tiny_exact.generate([], max_tokens=1)
    with pytest.raises(parity.Error, match="prompts: empty list"):
        tiny_exact.generate(np.zeros((0, 3), dtype=np.int64), max_tokens=1)
    with pytest.raises(parity.Error, match="3 forced continuations for 2 prompts"):
        tiny_exact.generate([[1], [2]], forced=[[1], [2], [3]])
    with pytest.raises(parity.Error, match="top_p"):
        tiny_exact.generate([1], top_p=0.0)


def test_bad_capture_and_validate_arguments(tiny_exact, parity, tmp_path):
    with pytest.raises(parity.Error, match="backbone.nothing"):
        tiny_exact.capture([1, 2], ["backbone.nothing"])
    with pytest.raises(parity.Error, match="layout"):
        tiny_exact.capture([1, 2], ["lm_head"], layout="diagonal")
    with pytest.raises(parity.Error, match="cannot open"):
        tiny_exact.validate(str(tmp_path / "missing.safetensors"))
    with pytest.raises(parity.Error, match="cannot open"):
        parity.read_captures(str(tmp_path / "missing.safetensors"))
    ref = tiny_exact.capture([1, 2, 3], ["backbone.norm_f"], max_tokens=2)
    with pytest.raises(parity.Error, match="lm_head"):
        tiny_exact.validate(ref)


def test_everything_public_has_a_docstring(parity):
    for name in parity.__all__:
        obj = getattr(parity, name)
        assert obj.__doc__ and len(obj.__doc__) > 20, name
        for attr, member in vars(obj).items() if isinstance(obj, type) else []:
            if not attr.startswith("_"):
                assert member.__doc__, f"{name}.{attr}"


def test_bad_device(parity):
    with pytest.raises(parity.Error, match="--device must be cpu or cuda, not 'tpu'"):
        parity.LLM("builtin:tiny", device="tpu")
    with pytest.raises(parity.Error, match="the CPU computes in float32"):
        parity.LLM("builtin:tiny", dtype="bfloat16")
    assert parity.LLM("builtin:tiny", dtype="float32").vocab_size == 512
