#!/usr/bin/env python3
"""Renders the chat-template cases of tests/data/chat_templates/cases.json with Jinja2 configured as
Hugging Face's apply_chat_template configures it (trim_blocks, lstrip_blocks, raise_exception,
tojson = json.dumps(ensure_ascii=False)), and writes the expected text (or that it raises) back
into the file. parity's own Jinja subset (src/frontends/server/chat_template.cpp) must reproduce
every case: tests/server_chat_template_test.cpp.

  python3 tools/chat_template_cases.py tests/data/chat_templates/cases.json
"""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(template, case):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    kwargs = {"messages": case["messages"], "add_generation_prompt": case.get("add_generation_prompt", True)}
    kwargs.update(case.get("special_tokens", {}))
    return env.from_string(template).render(**kwargs)


def main(path):
    with open(path) as f:
        data = json.load(f)
    for case in data["cases"]:
        template = data["templates"][case["template"]]
        case.pop("expected", None)
        case.pop("raises", None)
        try:
            case["expected"] = render(template, case)
        except TemplateError as e:
            case["raises"] = str(e)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
