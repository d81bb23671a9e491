"""parity: a C++ inference engine for Mamba2 and hybrid Mamba2 + attention + MoE models.

    import parity
    llm = parity.LLM("builtin:tiny", exact=True)
    out = llm.generate([1, 2, 3], max_tokens=8)[0]
    logits = llm.score([1, 2, 3] + out.token_ids)   # numpy float32 [rows, vocab]

Exact mode (exact=True) makes a request's logits bit-identical however it is scheduled. See
docs/python.md for the whole API; every failure raises parity.Error with the CLI's message.
"""

from ._core import (  # noqa: F401  (re-exported)
    LLM,
    Captures,
    CompletionOutput,
    Error,
    PromptCapture,
    Tokenizer,
    ValidationResult,
    load_tokenizer,
    read_captures,
)

__all__ = [
    "LLM",
    "Captures",
    "CompletionOutput",
    "Error",
    "PromptCapture",
    "Tokenizer",
    "ValidationResult",
    "load_tokenizer",
    "read_captures",
]
