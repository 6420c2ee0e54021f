#!/usr/bin/env python3
"""Write the chat-template goldens of the Go chat renderer.

For Qwen3, Llama 3.1 and 3.2 (whose template reassigns messages from itself), DeepSeek V3, Gemma 3,
Mistral Nemo and Command R+ (three named templates: default, tool_use, rag) this builds a few hundred chat completion requests (hand-written edge cases, then seeded random ones), prepares each the way vLLM
prepares a chat request, and writes internal/tokenize/chattemplate/testdata/<family>.jsonl.gz.
Llama 2 has no chat template: its file holds completion requests, with and without
add_special_tokens.

vLLM itself is not installed here (it needs torch). Its request preparation is followed step by step
from its source (vllm/entrypoints/chat_utils.py: parse_chat_messages, _postprocess_messages;
vllm/renderers/hf.py: resolve_chat_template, _detect_content_format, resolve_chat_template_kwargs,
safe_apply_chat_template; vllm/entrypoints/openai/protocol.py: the ChatCompletionRequest fields),
and the rendering and tokenization are the pinned reference stack's own: transformers'
apply_chat_template(tokenize=False) over Jinja2, then tokenizer(text, add_special_tokens=...).

The first line of each file describes the tokenizer and the templates' clock, frozen so that a template
printing today's date renders the same on any day ({"special_tokens_map": ..., "now": "<UTC time>"});
each further line
is one request:

    {"request": "<body as sent>", "text": "<rendered prompt>", "ids": [...]}
    {"request": "<body>", "error": "request" | "template", "message": "..."}

"request" errors are refused before rendering (vLLM answers 400), "template" errors are raised while
rendering (raise_exception, or a template that fails on the input; also 400 in vLLM).

Usage: python3 scripts/goldens/chat_goldens.py [--count N] [--out DIR] [family...]

A family is a directory under .cache/tokenizers. Any model's can be checked the same way without
committing it: put its tokenizer.json and tokenizer_config.json (and chat_template.jinja, if it has
one) in .cache/tokenizers/NAME, write its goldens elsewhere and run the Go test on them:

    python3 scripts/goldens/chat_goldens.py --out /tmp/goldens NAME
    CHAT_GOLDENS_DIR=/tmp/goldens CHAT_GOLDENS_FAMILIES=NAME go test ./internal/tokenize/chattemplate -run 'TestChatGoldens$' -v

The script makes its own venv (.venv/goldens) and fetches the pinned tokenizer files itself.
"""

import argparse
import datetime
import gzip
import io
import json
import os
import random
import subprocess
import sys
import zlib
from collections import deque

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _venv  # noqa: E402

_venv.ensure()

import inspect  # noqa: E402

import jinja2  # noqa: E402
import jinja2.ext  # noqa: E402
import jinja2.meta  # noqa: E402
import jinja2.nodes  # noqa: E402
import jinja2.sandbox  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer, PreTrainedTokenizer  # noqa: E402
from transformers.utils import chat_template_utils  # noqa: E402

ROOT = _venv.ROOT
CACHE = os.path.join(ROOT, ".cache", "tokenizers")
OUT = os.path.join(ROOT, "internal", "tokenize", "chattemplate", "testdata")
# The templates' clock: strftime_now reads it (Llama 3.2 prints today's date), so goldens made on any
# day are the same; each file's first line records it and the Go test renders at it.
GOLDENS_NOW = datetime.datetime(2026, 12, 5, 12, 0, 0)
CHAT_FAMILIES = ["qwen3", "llama3_1", "deepseek_v3", "gemma3", "llama3_2", "mistral_nemo", "command_r_plus"]


class RequestError(Exception):
    """A request vLLM refuses before rendering."""


class Unsupported(Exception):
    """A request the Go renderer deliberately does not follow; never written to the goldens."""


# ---------------------------------------------------------------------------------------------
# vLLM's request preparation, followed from its source.


def is_elems_access(node, name, key=None):
    """A variable (or its key), then any slices, filters and tests of it."""
    if isinstance(node, (jinja2.nodes.Filter, jinja2.nodes.Test)):
        return node.node is not None and is_elems_access(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return is_elems_access(node.node, name, key)
    if key is None:
        return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name
    base = None
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Const):
        base, k = node.node, node.arg.value
    elif isinstance(node, jinja2.nodes.Getattr):
        base, k = node.node, node.attr
    return base is not None and k == key and is_elems_access(base, name) and isinstance(base, jinja2.nodes.Name)


def detect_content_format(template):
    try:
        ast = chat_template_utils._compile_jinja_template(template).environment.parse(template)
    except Exception:
        return "string"
    try:
        names = deque(["messages"])
        msgs = ["messages"]
        while names:
            cur = names.popleft()
            for a in ast.find_all(jinja2.nodes.Assign):
                if is_elems_access(a.node, cur):
                    if not isinstance(a.target, jinja2.nodes.Name):
                        return "string"
                    msgs.append(a.target.name)
                    if a.target.name != cur:
                        names.append(a.target.name)
        items = []
        for loop in ast.find_all(jinja2.nodes.For):
            for m in msgs:
                if is_elems_access(loop.iter, m):
                    if not isinstance(loop.target, jinja2.nodes.Name):
                        return "string"
                    items.append(loop.target.name)
                    break
        for loop in ast.find_all(jinja2.nodes.For):
            for m in items:
                if is_elems_access(loop.iter, m, "content"):
                    return "openai" if isinstance(loop.target, jinja2.nodes.Name) else "string"
            if isinstance(loop.iter, jinja2.nodes.Name) and loop.iter.name == "content":
                return "openai" if isinstance(loop.target, jinja2.nodes.Name) else "string"
    except Exception:
        return "string"
    return "string"


def tool_dump(tool):
    """ChatCompletionToolsParam.model_dump(): declared fields first (with their None defaults),
    extra fields (the model allows them) after, in request order."""
    if not isinstance(tool, dict):
        raise RequestError("tool: not an object")
    if "type" in tool and tool["type"] != "function":
        raise RequestError("tool.type")
    fn = tool.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RequestError("tool.function")
    if fn.get("description") is not None and not isinstance(fn["description"], str):
        raise RequestError("tool.function.description")
    if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
        raise RequestError("tool.function.parameters")
    f = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
    f.update({k: v for k, v in fn.items() if k not in f})
    out = {"type": "function", "function": f}
    out.update({k: v for k, v in tool.items() if k not in out})
    return out


# The content part types vLLM reads as text (chat_utils.py: MM_PARSER_MAP and
# _parse_chat_message_content_part), and the field each holds its text in.
TEXT_FIELDS = {"text": "text", "refusal": "refusal", "input_text": "text", "output_text": "text",
               "thinking": "thinking"}


def text_parts(msg, fmt):
    """The texts of a message's content parts, empty ones included; a part whose text is None is
    left out (vLLM skips it; in the openai format a part other than text or refusal would reach the
    template with a None text, which the Go side does not predict)."""
    content = msg.get("content")
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise RequestError("content")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise RequestError("content part")
        field = TEXT_FIELDS.get(part.get("type")) if isinstance(part.get("type"), str) else None
        if field is None or part.get("uuid") is not None:
            raise Unsupported("multimodal")
        text = part.get(field)
        if text is None:
            if part["type"] not in ("text", "refusal") and fmt == "openai":
                raise Unsupported("multimodal")
            continue
        if not isinstance(text, str):
            raise RequestError("content part text")
        texts.append(text)
    return texts


def tool_call(item):
    """A ChatCompletionMessageToolCallParam as pydantic validates it (declared field order), with
    vLLM's _postprocess_messages parsing of the arguments."""
    fn = item.get("function") if isinstance(item, dict) else None
    if (not isinstance(item, dict) or not isinstance(item.get("id"), str) or item.get("type") != "function"
            or not isinstance(fn, dict) or not isinstance(fn.get("name"), str)
            or not isinstance(fn.get("arguments"), str)):
        raise RequestError("tool_calls")
    try:
        args = json.loads(fn["arguments"])
    except json.JSONDecodeError:
        args = {}
    return {"id": item["id"], "function": {"arguments": args, "name": fn["name"]}, "type": item["type"]}


def conversation(messages, fmt):
    conv = []
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise RequestError("message")
        role = msg["role"]
        texts = text_parts(msg, fmt)
        if fmt == "openai" and role != "tool":
            out = {"role": role, "content": [{"type": "text", "text": t} for t in texts]}
        elif fmt == "openai":
            # A tool result's text parts, joined after parsing (empty ones kept as parts).
            out = {"role": role, "content": "\n".join(texts)}
        else:
            # Reduced to a string, an empty text parses to nothing and is left out.
            out = {"role": role, "content": "\n".join(t for t in texts if t)}
        if role == "assistant":
            calls = msg.get("tool_calls")
            if calls is not None:
                if not isinstance(calls, list):
                    raise RequestError("tool_calls")
                calls = [tool_call(c) for c in calls]
                if calls:
                    out["tool_calls"] = calls
            reasoning = msg.get("reasoning")
            if reasoning is None:
                reasoning = msg.get("reasoning_content")  # the deprecated name
            if reasoning is not None:
                if not isinstance(reasoning, str):
                    raise RequestError("reasoning")
                out["reasoning"] = reasoning
                out["reasoning_content"] = reasoning
        elif role == "tool" and "tool_call_id" in msg:
            if msg["tool_call_id"] is not None and not isinstance(msg["tool_call_id"], str):
                raise RequestError("tool_call_id")
            out["tool_call_id"] = msg["tool_call_id"]
        for k in ("name", "task"):
            if isinstance(msg.get(k), str):
                out[k] = msg[k]
        if role == "developer":
            out["tools"] = msg.get("tools")
        conv.append(out)
    return conv


def names_developer(template):
    """vllm/renderers/hf.py's _detect_developer_role_support: the role named as a quoted string."""
    return '"developer"' in template or "'developer'" in template


def adapt_developer(conv, template):
    """safe_apply_chat_template (vllm/renderers/hf.py): for a template that does not name the developer
    role, developer messages become system messages without their tools, and then the system messages
    are merged into one at the front if any stands elsewhere (_convert_developer_to_system,
    _consolidate_system_messages)."""
    if not any(m["role"] == "developer" for m in conv):
        return conv
    if names_developer(template):
        if any(m["role"] == "developer" and m["tools"] is not None for m in conv):
            # Passed as pydantic validated them, which the Go renderer does not reproduce.
            raise Unsupported("developer")
        return conv
    converted = []
    for m in conv:
        if m["role"] == "developer":
            m = {k: ("system" if k == "role" else v) for k, v in m.items() if k != "tools"}
        converted.append(m)
    if not any(i > 0 and m["role"] == "system" for i, m in enumerate(converted)):
        return converted
    texts, rest = [], []
    for m in converted:
        if m["role"] != "system":
            rest.append(m)
            continue
        content = m.get("content", "")
        if isinstance(content, list):
            content = "\n".join(p["text"] if isinstance(p, dict) else p for p in content
                                if isinstance(p, str) or (isinstance(p, dict) and "text" in p))
        if content:
            texts.append(content)
    return [{"role": "system", "content": "\n\n".join(texts)}] + rest


def lax_bool(v, default):
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    raise RequestError("boolean")


class GenerationTag(jinja2.ext.Extension):
    """Parses {% generation %}...{% endgeneration %} as a block that renders its body: enough to
    read a template's variables, which is all vLLM parses it for."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


APPLY_PARAMS = frozenset(
    p.name for p in inspect.signature(PreTrainedTokenizer.apply_chat_template).parameters.values()
    if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL))


def render(tok, body, default_kwargs=None):
    """Returns (text, ids) for a request body, or raises RequestError / another exception."""
    req = json.loads(body)
    if req.get("chat_template") is not None:
        raise Unsupported("template")
    agp = lax_bool(req.get("add_generation_prompt"), True)
    cont = lax_bool(req.get("continue_final_message"), False)
    add_special = lax_bool(req.get("add_special_tokens"), False)
    if agp and cont:
        raise RequestError("continue_final_message and add_generation_prompt")
    tools = req.get("tools")
    tool_dicts = None if tools is None else [tool_dump(t) for t in tools]
    kwargs = dict(default_kwargs or {})
    kwargs.update({"tools": tool_dicts, "tokenize": False})
    req_kwargs = req.get("chat_template_kwargs")
    if req_kwargs is not None:
        if not isinstance(req_kwargs, dict):
            raise RequestError("chat_template_kwargs")
        if req_kwargs.get("chat_template") is not None:
            raise Unsupported("template")
        kwargs.update({k: v for k, v in req_kwargs.items() if v is not None and v != "auto"})
    kwargs["add_generation_prompt"] = agp
    kwargs["continue_final_message"] = cont
    if req.get("documents") is not None:
        docs = req["documents"]
        if not isinstance(docs, list) or not all(
                isinstance(d, dict) and all(isinstance(v, str) for v in d.values()) for d in docs):
            raise RequestError("documents")
        kwargs["documents"] = docs
    effort = req.get("reasoning_effort")
    if effort is not None:
        kwargs["reasoning_effort"] = effort
        if "enable_thinking" not in kwargs:
            kwargs["enable_thinking"] = effort != "none"
    if req_kwargs is not None and "tokenize" in req_kwargs:
        raise RequestError("tokenize in chat_template_kwargs")

    tools = kwargs.pop("tools")
    template = tok.get_chat_template(None, tools=tools)
    fmt = detect_content_format(template)
    conv = adapt_developer(conversation(req["messages"], fmt), template)

    # resolve_chat_template_kwargs: keep apply_chat_template's parameters, the template's
    # undeclared variables and the base class's parameters. vLLM parses the template knowing
    # transformers' {% generation %} tag (vllm/renderers/hf.py), so such a template keeps its kwargs.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[GenerationTag, jinja2.ext.loopcontrols])
    try:
        undeclared = jinja2.meta.find_undeclared_variables(env.parse(template))
    except jinja2.TemplateSyntaxError:
        undeclared = set()
    accept = (APPLY_PARAMS | undeclared) - {"chat_template", "tokenize"}
    kwargs.pop("tokenize")
    kwargs = {k: v for k, v in kwargs.items() if k in accept}
    kwargs["return_dict"] = False
    text = tok.apply_chat_template(conv, tools=tools, chat_template=template, tokenize=False, **kwargs)
    ids = tok(text, add_special_tokens=add_special)["input_ids"]
    return text, ids


# ---------------------------------------------------------------------------------------------
# Requests.

WORDS = ("the quick brown fox jumps over lazy dog weather Paris tomorrow please explain why how what "
         "function call result value token cache block prefix route model answer question").split()
UNICODE = ["café naïve", "日本語のテキスト", "中文文本。", "한국어", "Привет мир", "مرحبا بالعالم", "שלום",
           "emoji 😀👍🏽🇫🇷", "👨‍👩‍👧‍👦", "e\u0301 combining", "zero\u200bwidth", "ﬁ ligature", "𝐇𝐞𝐥𝐥𝐨",
           "\u00a0nbsp\u3000ideographic", "tab\there", "line\r\nbreak", "\u2028sep\u2029", "\x1f unit sep",
           "trailing  \n", "  leading", "\n\n", "", " ", "a\\b \"quoted\" 'single'", "{{ not a template }}",
           "{% raw %}x{% endraw %}", "%s %d {0} ${x}", "<think>\nhidden\n</think>\n\nvisible"]
SPECIALS = {
    "qwen3": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
              "<tool_response>"],
    "llama3_1": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
                 "<|python_tag|>"],
    "deepseek_v3": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                    "<｜tool▁calls▁begin｜>"],
    "gemma3": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<pad>"],
    "llama3_2": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>"],
    "mistral_nemo": ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[TOOL_RESULTS]"],
    "command_r_plus": ["<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>",
                       "<|CHATBOT_TOKEN|>", "<|SYSTEM_TOKEN|>"],
}
ARGS = ['{"city": "Paris", "days": 3}', '{"x": 1.0, "y": 1, "z": -0.5, "big": 12345678901234}',
        '{"b": 2, "a": 1, "nested": {"z": [1, 2.50, {"k": null}], "a": true}}', '{"e": 1e5, "f": 1E-3}',
        '{"text": "caf\\u00e9 \\ud83d\\ude00 <tag> & \\"q\\""}', "{}", "", "   ", "not json", "[1, 2, 3]",
        '"just a string"', "42", '{"dup": 1, "dup": 2, "other": 0}', '{"unicode_key_é": "值"}',
        '{"list": [], "obj": {}, "f": 0.1, "g": 100.0}', 'null']


def tool_defs(rng):
    params = [
        {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 14}},
         "required": ["city"]},
        {"type": "object", "properties": {"x": {"type": "number", "default": 1.0},
                                           "mode": {"type": "string", "enum": ["fast", "exact"]}}},
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {"q": {"type": "string", "description": "Recherche « exacte » 検索"}},
         "additionalProperties": False},
    ]
    tools = []
    for i in range(rng.randint(1, 3)):
        fn = {"name": rng.choice(["get_weather", "search", "calc", "lookup_ü"]) + str(i)}
        r = rng.random()
        if r < 0.7:
            fn["description"] = rng.choice(["Get the weather.", "Search the web for <things> & stuff.",
                                            "Compute 1/3 ≈ 0.333", ""])
        elif r < 0.8:
            fn["description"] = None
        if rng.random() < 0.85:
            fn["parameters"] = rng.choice(params)
        if rng.random() < 0.2:
            fn["strict"] = rng.choice([True, False])
        tool = {"type": "function", "function": fn} if rng.random() < 0.9 else {"function": fn}
        tools.append(tool)
    return tools


def text(rng, fam):
    r = rng.random()
    if r < 0.45:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))).capitalize() + rng.choice(
            [".", "?", "!", "", "\n"])
    if r < 0.7:
        return rng.choice(UNICODE) + " " + rng.choice(WORDS)
    if r < 0.85:
        return rng.choice(WORDS) + " " + rng.choice(SPECIALS[fam]) + " " + rng.choice(WORDS)
    return rng.choice(["", " ", "\n", "  padded  ", "x" * rng.randint(1, 40), rng.choice(UNICODE)])


def content(rng, fam):
    r = rng.random()
    if r < 0.75:
        return text(rng, fam)
    parts = []
    for _ in range(rng.randint(0, 3)):
        parts.append(text(rng, fam) if rng.random() < 0.2 else {"type": "text", "text": text(rng, fam)})
    return parts


def random_request(rng, fam):
    msgs = []
    r = rng.random()
    if r < 0.5:
        msgs.append({"role": "system", "content": content(rng, fam)})
        if fam in ("qwen3", "deepseek_v3") and rng.random() < 0.2:
            msgs.append({"role": "system", "content": content(rng, fam)})
    tools = tool_defs(rng) if fam != "gemma3" and rng.random() < 0.3 else None
    turns = rng.randint(1, 4)
    for t in range(turns):
        msgs.append({"role": "user", "content": content(rng, fam)})
        if t == turns - 1 and rng.random() < 0.8:
            break
        a = {"role": "assistant", "content": content(rng, fam)}
        if fam == "qwen3" and rng.random() < 0.3:
            a[rng.choice(["reasoning_content", "reasoning"])] = text(rng, fam)
        if tools and rng.random() < 0.6:
            calls = []
            for k in range(rng.randint(1, 2)):
                calls.append({"id": f"call_{t}_{k}", "type": "function",
                              "function": {"name": tools[0]["function"]["name"], "arguments": rng.choice(ARGS)}})
            a["tool_calls"] = calls
            if rng.random() < 0.5:
                a["content"] = None
            msgs.append(a)
            for c in calls:
                tm = {"role": "tool", "tool_call_id": c["id"], "content": content(rng, fam)}
                msgs.append(tm)
            continue
        msgs.append(a)
    req = {"model": fam, "messages": msgs}
    if tools is not None:
        req["tools"] = tools
    r = rng.random()
    if r < 0.1:
        req["add_generation_prompt"] = False
    elif r < 0.2 and msgs[-1]["role"] in ("user", "assistant"):
        msgs.append({"role": "assistant", "content": text(rng, fam) or "Sure"})
        req["continue_final_message"] = True
        req["add_generation_prompt"] = False
    elif r < 0.23:
        req["continue_final_message"] = True
    if rng.random() < 0.25:
        kw = {}
        if rng.random() < 0.7:
            kw["enable_thinking"] = rng.choice([True, False])
        if rng.random() < 0.3:
            kw["custom_flag"] = rng.choice([1, 1.0, "x", None, "auto"])
        req["chat_template_kwargs"] = kw
    if rng.random() < 0.05:
        req["reasoning_effort"] = rng.choice(["none", "low", "high"])
    if rng.random() < 0.05:
        req["add_special_tokens"] = True
    return req


def edge_requests(fam):
    s = SPECIALS[fam]
    u = lambda c: {"role": "user", "content": c}  # noqa: E731
    a = lambda c: {"role": "assistant", "content": c}  # noqa: E731
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                             "parameters": {"type": "object", "properties": {
                                                 "city": {"type": "string"}, "unit": {"type": "string",
                                                                                      "enum": ["c", "f"]}},
                                                 "required": ["city"]}}}
    call = lambda args: {"id": "call_1", "type": "function",  # noqa: E731
                         "function": {"name": "get_weather", "arguments": args}}
    reqs = [
        {"messages": [u("Hello")]},
        {"messages": [u("Hello")], "add_generation_prompt": False},
        {"messages": [{"role": "system", "content": "You are terse."}, u("Hi"), a("Hello!"), u("Bye")]},
        {"messages": []},
        {"messages": [u("")]},
        {"messages": [u(None)]},
        {"messages": [u([])]},
        {"messages": [u([{"type": "text", "text": "part one"}, "part two", {"type": "text", "text": "three"}])]},
        {"messages": [u([{"type": "text", "text": None}, {"type": "text", "text": "kept"}])]},
        {"messages": [u([{"type": "text", "text": "a"}, {"type": "text", "text": ""}, {"type": "text", "text": "b"}])]},
        {"messages": [u(["", "between empties", ""])]},
        {"messages": [u([{"type": "input_text", "text": "in"}, {"type": "output_text", "text": "out"},
                         {"type": "thinking", "thinking": "th"}, {"type": "refusal", "refusal": "no"}])]},
        {"messages": [u([{"type": "input_text", "text": None}, {"type": "text", "text": "after none"}])]},
        {"messages": [u("  spaces around  ")]},
        {"messages": [u("special " + " ".join(s) + " tokens")]},
        {"messages": [u(s[0] + s[1])]},
        {"messages": [u("Hi"), a("Sure, here")], "continue_final_message": True, "add_generation_prompt": False},
        {"messages": [u("Hi"), a("trailing space ")], "continue_final_message": True,
         "add_generation_prompt": False},
        {"messages": [u("Hi"), a("  ")], "continue_final_message": True, "add_generation_prompt": False},
        {"messages": [u("Hi"), a([{"type": "text", "text": "from parts"}])], "continue_final_message": True,
         "add_generation_prompt": False},
        {"messages": [u("Hi"), a("x")], "continue_final_message": True},
        {"messages": [u("continue the user")], "continue_final_message": True, "add_generation_prompt": False},
        {"messages": [u("Weather?")], "tools": [tool]},
        {"messages": [u("Weather?")], "tools": []},
        {"messages": [u("Weather?")], "tools": [tool], "chat_template_kwargs": {"enable_thinking": False}},
        {"messages": [u("Weather in Paris?"), {"role": "assistant", "content": None,
                                                "tool_calls": [call('{"city": "Paris", "unit": "c"}')]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}], "tools": [tool]},
        {"messages": [u("Weather?"), {"role": "assistant", "content": "Checking.",
                                       "tool_calls": [call('{"b": 1.0, "a": 1, "c": [1e5, 2.50]}'),
                                                      call("not json")]},
                      {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "r1"},
                                                                             {"type": "text", "text": "r2"}]},
                      {"role": "tool", "content": "r3"}], "tools": [tool]},
        {"messages": [u("Weather?"), {"role": "assistant", "content": None, "tool_calls": [call("{}")]},
                      {"role": "tool", "tool_call_id": "call_1", "content": [
                          {"type": "text", "text": "r1"}, {"type": "text", "text": ""}, "r2"]}], "tools": [tool]},
        {"messages": [u("x"), {"role": "assistant", "content": "", "tool_calls": []}, u("y")]},
        {"messages": [u("Q"), {"role": "assistant", "content": "A", "reasoning_content": "thinking..."}, u("Q2")]},
        {"messages": [u("Q"), {"role": "assistant", "content": "<think>\ninner\n</think>\n\nA"}, u("Q2")]},
        {"messages": [u("Q")], "chat_template_kwargs": {"enable_thinking": False}},
        {"messages": [u("Q")], "chat_template_kwargs": {"enable_thinking": True}},
        {"messages": [u("Q")], "chat_template_kwargs": {"enable_thinking": None}},
        {"messages": [u("Q")], "reasoning_effort": "none"},
        {"messages": [u("Q")], "reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}},
        {"messages": [u("Q")], "chat_template_kwargs": {"tokenize": True}},
        {"messages": [u("Q")], "chat_template_kwargs": {"bos_token": "<custom-bos>"}},
        {"messages": [u("Q")], "add_special_tokens": True},
        {"messages": [{"role": "system", "content": "one"}, {"role": "system", "content": "two"}, u("Q")]},
        {"messages": [{"role": "system", "content": [{"type": "text", "text": "sys part"}]}, u("Q")]},
        {"messages": [u("a"), u("b")]},
        {"messages": [a("assistant first"), u("then user")]},
        {"messages": [u("Q"), a("A"), u("Q2"), a("A2"), u("Q3"), a("A3"), u("Q4")]},
        {"messages": [u("Q"), {"role": "assistant", "content": "A", "name": "bot"}, u("Q2")]},
        {"messages": [{"role": "user", "content": "named", "name": "alice"}]},
        {"messages": [u("\U0001F600" * 5 + "\u0301\u200d" + "\ufeff")]},
        {"messages": [u("{{ bos_token }} {% if true %}x{% endif %}")]},
        {"messages": [u("Doc question")], "documents": [{"title": "T", "text": "Body"}]},
        # None of these templates names the developer role: developer messages become system ones,
        # merged with the others into one at the front where one stands elsewhere.
        {"messages": [{"role": "developer", "content": "Be brief."}, u("Hi")]},
        {"messages": [{"role": "developer", "content": "Be brief.", "name": "dev"}, u("Hi"), a("Hello!"), u("Bye")]},
        {"messages": [{"role": "system", "content": "You are terse."}, u("Hi"), a("Hello!"),
                      {"role": "developer", "content": "Answer in French."}, u("Bye")]},
        {"messages": [u("Hi"), {"role": "developer", "content": [{"type": "text", "text": "one"},
                                                                   {"type": "text", "text": ""}, "two"]}]},
        {"messages": [{"role": "developer", "content": "D", "tools": [tool]}, {"role": "system", "content": ""},
                      u("Weather?")], "tools": [tool]},
        {"messages": [u("Hi"), a("Sure"), {"role": "developer", "content": None}], "continue_final_message": True,
         "add_generation_prompt": False},
    ]
    return [dict({"model": fam}, **r) for r in reqs]


def completion_requests(rng):
    prompts = ["Hello world", "", " ", "<s>inner bos</s>", "  leading", "Unicode 日本語 😀", "line\nbreak",
               "[INST] question [/INST]"]
    for _ in range(60):
        prompts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20))))
    reqs = []
    for i, p in enumerate(prompts):
        req = {"model": "llama2", "prompt": p}
        if i % 3 == 1:
            req["add_special_tokens"] = False
        elif i % 3 == 2:
            req["add_special_tokens"] = True
        reqs.append(req)
    return reqs


# ---------------------------------------------------------------------------------------------


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def write_gz(path, lines):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for line in lines:
            gz.write(dumps(line).encode("utf-8") + b"\n")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return len(buf.getvalue())


def header(tok):
    """The first line of a goldens file: what the Go test needs to render as transformers did."""
    return {"special_tokens_map": tok.special_tokens_map, "now": GOLDENS_NOW.isoformat() + "Z"}


def freeze_template_clock():
    """Makes the templates' strftime_now read GOLDENS_NOW instead of the day the script runs."""
    if not isinstance(getattr(chat_template_utils, "datetime", None), type):
        sys.exit("goldens: transformers' chat_template_utils no longer reads the clock through datetime; "
                 "freeze its strftime_now another way")

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            if tz is None:
                return GOLDENS_NOW
            return GOLDENS_NOW.replace(tzinfo=datetime.timezone.utc).astimezone(tz)

    chat_template_utils.datetime = Frozen


def write_chat_family(fam, count, out):
    tok = AutoTokenizer.from_pretrained(os.path.join(CACHE, fam))
    own = list(tok.all_special_tokens)[:8]  # a family not in SPECIALS: its own, two at least
    SPECIALS.setdefault(fam, own if len(own) >= 2 else own + ["<s>", "</s>"])
    rng = random.Random(zlib.crc32(("chat:" + fam).encode()))
    reqs = edge_requests(fam) + [random_request(rng, fam) for _ in range(count)]
    lines = [header(tok)]
    stats = {"ok": 0, "request": 0, "template": 0, "skipped": 0}
    for req in reqs:
        body = dumps(req)
        try:
            text, ids = render(tok, body)
        except Unsupported:
            stats["skipped"] += 1
            continue
        except RequestError as e:
            lines.append({"request": body, "error": "request", "message": str(e)})
            stats["request"] += 1
            continue
        except Exception as e:  # raised while rendering
            lines.append({"request": body, "error": "template", "message": f"{type(e).__name__}: {e}"})
            stats["template"] += 1
            continue
        lines.append({"request": body, "text": text, "ids": ids})
        stats["ok"] += 1
    path = os.path.join(out, fam + ".jsonl.gz")
    size = write_gz(path, lines)
    print(f"goldens: {os.path.relpath(path, ROOT)}: {len(reqs)} requests {stats}, {size} bytes", file=sys.stderr)


def write_completions(out):
    tok = AutoTokenizer.from_pretrained(os.path.join(CACHE, "llama2"))
    lines = [header(tok)]
    for req in completion_requests(random.Random(2)):
        ids = tok(req["prompt"], add_special_tokens=req.get("add_special_tokens", True))["input_ids"]
        lines.append({"request": dumps(req), "ids": ids})
    path = os.path.join(out, "llama2.jsonl.gz")
    size = write_gz(path, lines)
    print(f"goldens: {os.path.relpath(path, ROOT)}: {len(lines) - 1} completion requests, {size} bytes",
          file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=200, help="random requests per chat family (default 200)")
    ap.add_argument("--out", default=OUT, help="output directory (default internal/tokenize/chattemplate/testdata)")
    ap.add_argument("family", nargs="*", help="families to write (default: the chat families and llama2)")
    args = ap.parse_args()
    fams = args.family or CHAT_FAMILIES + ["llama2"]
    missing = [f for f in fams if not os.path.exists(os.path.join(CACHE, f, "tokenizer.json"))]
    with open(os.path.join(ROOT, "scripts", "tokenizers.lock")) as lock:
        pinned = {line.split()[0] for line in lock if line.strip() and not line.startswith("#")}
    if set(missing) - pinned:
        sys.exit(f"goldens: no tokenizer files in .cache/tokenizers for {sorted(set(missing) - pinned)}")
    # The pinned families are fetched, or checked and given their config.json (a few hashes).
    if set(fams) & pinned:
        subprocess.run([os.path.join(ROOT, "scripts", "fetch-tokenizers.sh")] + sorted(set(fams) & pinned),
                       check=True, stdout=subprocess.DEVNULL)
    print(f"goldens: transformers {transformers.__version__}, jinja2 {jinja2.__version__}", file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    freeze_template_clock()
    for fam in fams:
        if fam == "llama2":
            write_completions(args.out)
        else:
            write_chat_family(fam, args.count, args.out)


if __name__ == "__main__":
    main()
