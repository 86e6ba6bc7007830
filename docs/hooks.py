"""Build-time hooks of the documentation site: TeX rendered to MathML, the service's API pages.

Math: pymdownx.arithmatex (generic mode) marks every `$...$` and `$$...$$` of the pages and of
the docstrings mkdocstrings renders; `on_page_content` replaces each mark by MathML Core
(math-core), which browsers render natively. The site needs no JavaScript and no network for its
math, and a formula that does not parse fails the build.

Service API: `on_files` adds a page and `openapi.json`, both made from `schedlab.serve.openapi()`,
the document the service answers at /v1/openapi.json; no server is started.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import math_core
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

__all__ = ["on_files", "on_page_content", "openapi_markdown"]

API_PAGE = "service-api.md"
API_JSON = "openapi.json"

# arithmatex's generic output: <span class="arithmatex">\(TeX\)</span>, <div class="arithmatex">\[TeX\]</div>
_MARKED_TEX = re.compile(r'<(?P<tag>span|div) class="arithmatex">\\[(\[](?P<tex>.*?)\\[)\]]</(?P=tag)>', re.S)
_TEX_TO_MATHML = math_core.LatexToMathML()


def _mathml(match: re.Match[str], page: Any) -> str:
    """One marked formula as MathML: display style for `$$` blocks, text style inline."""
    tex = html.unescape(match["tex"])
    try:
        return _TEX_TO_MATHML.convert_with_local_state(tex, displaystyle=match["tag"] == "div")
    except math_core.LatexError as err:
        raise PluginError(f"{page.file.src_uri}: cannot render {tex.strip()!r}: {err}") from err


def on_page_content(html_text: str, page: Any, **_: Any) -> str:
    """Replace every formula arithmatex marked on the page by its MathML."""
    return _MARKED_TEX.sub(lambda match: _mathml(match, page), html_text)


def _schema_link(content: dict[str, Any]) -> str:
    """The component a request or response body refers to, as a link to its section."""
    ref = content["application/json"]["schema"]["$ref"]
    name = ref.rsplit("/", 1)[-1]
    return f"[{name}](#{name.lower()})"


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    """One operation's section: summary, parameters, request body, responses."""
    lines = [f"## {method.upper()} {path}", "", op["summary"], ""]
    if "parameters" in op:
        lines += ["| parameter | in | required | schema |", "|---|---|---|---|"]
        lines += [f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | `{json.dumps(p['schema'])}` |"
                  for p in op["parameters"]]
        lines.append("")
    if "requestBody" in op:
        lines += [f"Request body: `application/json`, {_schema_link(op['requestBody']['content'])}", ""]
    lines += ["| status | description | body |", "|---|---|---|"]
    lines += [f"| {status} | {r['description']} | {_schema_link(r['content']) if 'content' in r else ''} |"
              for status, r in op["responses"].items()]
    return [*lines, ""]


def openapi_markdown(doc: dict[str, Any]) -> str:
    """An OpenAPI 3.1 document as a Markdown page: the operations, then every component schema."""
    info = doc["info"]
    lines = [
        "# Service API", "",
        f"The HTTP API of `schedlab serve` {info['version']}: {info['description']} This page is generated"
        f" when the site is built from the OpenAPI {doc['openapi']} document the service answers at"
        f" `/v1/openapi.json` ([{API_JSON}]({API_JSON})).", "",
        "| method | path | summary |", "|---|---|---|",
    ]
    operations = [(path, method, op) for path, methods in doc["paths"].items() for method, op in methods.items()]
    lines += [f"| {method.upper()} | `{path}` | {op['summary']} |" for path, method, op in operations]
    lines.append("")
    for path, method, op in operations:
        lines += _operation(path, method, op)
    lines += ["## Schemas", ""]
    for name, schema in doc["components"]["schemas"].items():
        body = json.dumps(schema, indent=2).replace("\n", "\n    ")
        lines += [f"### {name} {{#{name.lower()}}}", "", schema.get("description", ""), "",
                  f'??? note "{name} as JSON Schema"', "    ```json", f"    {body}", "    ```", ""]
    return "\n".join(lines)


def on_files(files: Files, config: Any, **_: Any) -> Files:
    """Add the service's API page and its OpenAPI document, made from the service's own function."""
    from schedlab.serve import openapi

    doc = openapi()
    files.append(File.generated(config, API_PAGE, content=openapi_markdown(doc)))
    files.append(File.generated(config, API_JSON, content=json.dumps(doc, indent=2)))
    return files
