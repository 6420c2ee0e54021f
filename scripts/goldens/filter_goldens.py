#!/usr/bin/env python3
"""Write the filter goldens of the Go chat renderer: what Jinja2 renders for templates using the
filters, tests and methods the renderer replaces.

internal/tokenize/chattemplate replaces some of its template engine's filters, tests and string
methods with Python-exact ones and rewrites templates to reach them (filters.go): filters and tests
named as strings to map, select, reject, selectattr and rejectattr (map('upper'),
select('iterable'), map('map', 'upper')), Python's full case mapping (ß, a final sigma, Turkish
dotted and dotless i, the title-case digraphs ǅ, ǈ, ǋ), tuples, namespaces and unpacked arguments.
This renders each case below the way transformers renders a chat template (its
render_jinja_template over Jinja2, under the pinned reference stack), over one user message, and
writes internal/tokenize/chattemplate/testdata/filters.jsonl.gz, one line per case:

    {"template": "...", "content": "<the user message>", "text": "<rendered>"}
    {"template": "...", "content": "...", "error": "<Python's exception>"}

TestFilterGoldens renders each template as the gateway does and checks the text, or that it fails
where Jinja2 raises (the messages differ).

Usage: python3 scripts/goldens/filter_goldens.py
"""

import gzip
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _venv  # noqa: E402

_venv.ensure()

from transformers.utils import chat_template_utils  # noqa: E402

OUT = os.path.join(_venv.ROOT, "internal", "tokenize", "chattemplate", "testdata", "filters.jsonl.gz")

# Each case is (template, the user message's content). Templates read the content as
# messages[0].content, so that text from a request takes the same paths as literals.
C = "messages[0].content"
CASES = [
    # Filters and tests named as strings to the higher-order filters.
    ("{{ ['straße', 'ǆa b', 'ΟΔΟΣ']|map('upper')|join(',') }}|{{ [" + C + "]|map('upper')|list }}", "straße"),
    ("{{ [" + C + ", 'ΣΑΣ.']|map('lower')|list }}|{{ ['ΑΣ', 'ßa', 'ǆa']|map('capitalize')|join(',') }}", "ΟΔΟΣ"),
    ("{{ ['temperature_unit', \"it's a-b (c)\", 'ǆungla']|map('title')|join(',') }}|{{ messages|map(attribute='content')|map('title')|join }}", "get_current_WEATHER"),
    ("{{ messages|map(attribute='content')|map('trim')|list }}|{{ ['xxhixx']|map('trim', 'x')|join }}|{{ [[" + C + "]]|map('string')|join }}", "\x1c a\u200db\u00a0\u3000\x1f"),
    ("{{ [{'b': 1, 'C': 2, 'a': 3}]|map('dictsort')|list }}|{{ [[1, 'x'], ['a']]|map('join', '-')|join(';') }}", "x"),
    ("{{ [nothing, 1, 'a', none, [2], {}]|select('iterable')|list|length }}|{{ [nothing, 1, 'a']|reject('sequence')|list }}|{{ none|select('iterable')|list }}", "x"),
    ("{% set xs = [{'n': 'a', 'v': [1]}, {'n': 'b', 'v': 2}, {'n': 'c'}, {'n': 'd', 'v': 'str'}] %}"
     "{{ xs|selectattr('v', 'iterable')|map(attribute='n')|join(',') }}|{{ xs|rejectattr('v', 'sequence')|map(attribute='n')|join(',') }}"
     "|{{ xs|selectattr('v', 'sequence')|map(attribute='n')|join(',') }}|{{ xs|rejectattr('v', 'iterable')|map(attribute='n')|join(',') }}", "x"),
    ("{{ [['a', 'b'], [" + C + "]]|map('map', 'upper')|map('list')|list }}|{{ [[nothing, 1]]|map('select', 'iterable')|map('list')|list }}", "straße"),
    ("{{ [[{'v': [1]}, {'v': 2}]]|map('selectattr', 'v', 'iterable')|map('list')|list }}|{{ [[['ß']]]|map('map', 'map', 'upper')|map('map', 'list')|map('list')|list }}", "x"),
    ("{{ ['a', 'bb']|map('length')|list }}|{{ [[1, 2, 3]]|map('select', 'odd')|map('list')|list }}|{{ ['1', '2']|map('int')|sum }}", "x"),
    # Case mapping in full: ß, a final sigma, Turkish i, title-case digraphs, ligatures.
    ("{{ " + C + "|upper }}|{{ 'straße'|upper }}|{{ 'ﬁx ŉ'|upper }}|{{ " + C + "|title }}|{{ " + C + "|capitalize }}", "straße"),
    ("{{ " + C + "|lower }}|{{ " + C + "|capitalize }}|{{ " + C + "|title }}|{{ 'ΑΣ ΑΣ.'|lower }}|{{ 'Σ'|lower }}|{{ 'ΑΣ'|capitalize }}", "ΟΔΟΣ ΣΑΣ"),
    ("{{ " + C + "|lower }}|{{ (" + C + "|lower)|length }}|{{ " + C + "|upper }}|{{ " + C + "|title }}|{{ " + C + "|capitalize }}", "İstanbul ıi IŞIK"),
    ("{{ " + C + "|upper }}|{{ " + C + "|lower }}|{{ " + C + "|title }}|{{ " + C + "|capitalize }}|{{ 'ǅungla ǈ ǋ'|upper }}", "ǆungla ǉ ǌa ǅx"),
    ("{{ " + C + ".upper() }}|{{ " + C + ".lower() }}|{{ " + C + ".title() }}|{{ " + C + ".capitalize() }}", "ǅa straße ΣΑΣ İı"),
    ("{{ \"they're bill's a1b c_d x-y\".title() }}|{{ 'ß ﬁx ŉ'.title() }}|{{ 'ªb ǈ ⓐb'.title() }}|{{ \"ΑΣ'Β\".title() }}", "x"),
    # Tuples, namespaces and unpacked arguments.
    ("{% set d = {'b': 1, 'a': 2} %}{{ d|dictsort }}|{% for p in d.items() %}{{ p }}{% endfor %}|{{ d|items|list }}|{{ (1,) }}|{{ d|dictsort|first }}", "x"),
    ("{% set ns = namespace(a=1) %}{{ ns is iterable }}|{{ ns is sequence }}|{{ ns is mapping }}|{{ ns }}", "x"),
    ("{% set ns = namespace(a=1) %}{{ ns|length }}", "x"),
    ("{% macro f(a, b, c=3) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{% macro g(x) %}[{{ caller(x) }}]{% endmacro %}"
     "{{ f(*[1], b=2, **{'c': 4}) }}|{{ f(c=5, *" + C + ") }}|{% call(v) g(*[" + C + "]) %}<{{ v|upper }}>{% endcall %}", "ab"),
]


def render(template, content):
    out = chat_template_utils.render_jinja_template(
        conversations=[[{"role": "user", "content": content}]], chat_template=template)
    return out[0][0] if isinstance(out, tuple) else out


def main():
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:
        for template, content in CASES:
            case = {"template": template, "content": content}
            try:
                case["text"] = render(template, content)
            except Exception as e:  # the case is what Jinja2 refuses
                case["error"] = f"{type(e).__name__}: {e}"
            f.write((json.dumps(case, ensure_ascii=False) + "\n").encode())


if __name__ == "__main__":
    main()
