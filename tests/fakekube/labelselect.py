"""Label and field selectors for the fake API server's LIST (test infrastructure only).

Label selectors follow the Kubernetes grammar: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
``k notin (a,b)``, ``k``, ``!k``, ``k>1``, ``k<1``; a comma means AND; keys and values must be
valid label syntax. A malformed selector is a 400 BadRequest. Field selectors support ``=``,
``==`` and ``!=`` on the fields a resource declares (always metadata.name and
metadata.namespace).
"""

from __future__ import annotations

import re

import kubeschema as ks
from registry import Resource, bad_request


def _tokens(text: str) -> list[tuple[str, str]]:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith(("!=", "=="), i):
            out.append(("op", text[i:i + 2]))
            i += 2
        elif c in "=<>":
            out.append(("op", c))
            i += 1
        elif c in "!(),":
            out.append((c, c))
            i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in "!=<>(),":
                j += 1
            out.append(("id", text[i:j]))
            i = j
    return out


def parse_label_selector(text: str) -> list[tuple]:
    """``k=v,k==v,k!=v,k in (a,b),k notin (a),k,!k,k>1,k<2`` -> [(key, op, value)]."""
    toks, pos, reqs = _tokens(text), 0, []

    def fail(found, expected):
        raise bad_request(f"unable to parse requirement: found '{found}', expected: {expected}")

    def peek():
        return toks[pos] if pos < len(toks) else ("end", "end of string")

    while toks:
        kind, val = peek()
        if kind == "!":
            pos += 1
            kind, val = peek()
            if kind != "id":
                fail(val, "identifier after '!'")
            reqs.append((val, "!", None))
            pos += 1
        elif kind == "id":
            key = val
            pos += 1
            kind, val = peek()
            if kind in ("end", ","):
                reqs.append((key, "exists", None))
            elif kind == "op":
                pos += 1
                vkind, value = peek()
                if vkind == "id":
                    pos += 1
                elif vkind in ("end", ",") and val in ("=", "==", "!="):
                    value = ""
                else:
                    fail(value, "a value")
                if val in ("<", ">") and not re.fullmatch(r"-?\d+", value):
                    fail(value, "an integer")
                reqs.append((key, "=" if val == "==" else val, value))
            elif kind == "id" and val in ("in", "notin"):
                op = val
                pos += 1
                if peek()[0] != "(":
                    fail(peek()[1], "'('")
                pos += 1
                values = []
                while True:
                    vkind, value = peek()
                    if vkind == ")":
                        pos += 1
                        break
                    if vkind == "id":
                        values.append(value)
                        pos += 1
                    elif vkind == ",":
                        pos += 1
                    else:
                        fail(value, "',' or ')'")
                if not values:
                    raise bad_request("unable to parse requirement: for 'in', 'notin' operators, "
                                      "values set can't be empty")
                reqs.append((key, op, set(values)))
            else:
                fail(val, "'=', '!=', '==', 'in', 'notin'")
        else:
            fail(val, "!, identifier")
        key, op, value = reqs[-1]
        problems = ks.qualified_name_problems(key)
        for v in ([] if value is None else [value] if isinstance(value, str) else value):
            if op not in ("<", ">"):
                problems += ks.label_value_problems(v)
        if problems:
            raise bad_request(f"unable to parse requirement: {problems[0]}")
        kind, val = peek()
        if kind == "end":
            break
        if kind != ",":
            fail(val, "',' or 'end of string'")
        pos += 1
        if peek()[0] == "end":
            fail("end of string", "identifier")
    return reqs


def labels_match(reqs, labels: dict) -> bool:
    for key, op, value in reqs:
        has, cur = key in labels, labels.get(key)
        ok = {"=": lambda: has and cur == value,
              "!=": lambda: not has or cur != value,
              "in": lambda: has and cur in value,
              "notin": lambda: not has or cur not in value,
              "exists": lambda: has,
              "!": lambda: not has,
              ">": lambda: has and re.fullmatch(r"-?\d+", cur) and int(cur) > int(value),
              "<": lambda: has and re.fullmatch(r"-?\d+", cur) and int(cur) < int(value)}[op]()
        if not ok:
            return False
    return True


def parse_field_selector(text: str, res: Resource) -> list[tuple]:
    reqs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"([^!=]+?)\s*(!=|==|=)\s*(.*)", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = m.groups()
        if field not in res.field_labels:
            raise bad_request(f'field label not supported: {field}')
        reqs.append((field, "!=" if op == "!=" else "=", value))
    return reqs


def field_value(obj: dict, field: str) -> str:
    node = obj
    for part in field.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)
