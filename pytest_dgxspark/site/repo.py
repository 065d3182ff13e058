"""The site repository's own automation, read as text: Make rules and recipes, Ansible playbook references."""

from __future__ import annotations

import re

_MAKE_RULE = re.compile(r"^([^\s:=#][^:=]*?)\s*:(?!=)\s*(.*)$")


def parse_make_rules(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """Make rules as target -> (prerequisites, recipe lines); continuation lines are joined."""
    rules: dict[str, tuple[list[str], list[str]]] = {}
    current: list[str] = []
    joined = re.sub(r"\\\n[ \t]*", " ", text or "")
    for line in joined.splitlines():
        if line.startswith("\t"):
            for target in current:
                rules[target][1].append(line.strip())
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _MAKE_RULE.match(line)
        if match is None or match.group(1).startswith("."):
            current = []
            continue
        body = match.group(2).split("#", 1)[0]
        prereqs, _, inline = body.partition(";")
        current = match.group(1).split()
        for target in current:
            old = rules.get(target, ([], []))
            rules[target] = (old[0] + prereqs.split(), old[1] + ([inline.strip()] if inline.strip() else []))
    return rules


def make_recipe_closure(rules: dict[str, tuple[list[str], list[str]]], target: str) -> list[str]:
    """Recipe lines of a target and of every prerequisite target it depends on."""
    lines: list[str] = []
    seen: set[str] = set()
    stack = [target]
    while stack:
        name = stack.pop()
        if name in seen or name not in rules:
            continue
        seen.add(name)
        prereqs, recipe = rules[name]
        lines.extend(recipe)
        stack.extend(prereqs)
    return lines


def strip_yaml_comments(text: str) -> str:
    """YAML/Jinja text without '#' comments (full-line and trailing) and Jinja comments."""
    text = re.sub(r"\{#.*?#\}", "", text or "", flags=re.DOTALL)
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


_ANSIBLE_REF = re.compile(
    r"(?:import_playbook|include_tasks|import_tasks|include_vars|src|file|template)\s*:\s*[\"']?([\w./{}\- ]+?\.(?:ya?ml|j2))"
)
_ROLE_REF = re.compile(r"(?:^|\s|-\s)(?:role|name)\s*:\s*[\"']?([\w.]+)[\"']?\s*$", re.MULTILINE)
_ROLES_LIST = re.compile(r"^\s*roles:\s*\n((?:\s*-\s*[\w.]+\s*\n)+)", re.MULTILINE)


def ansible_references(text: str) -> tuple[list[str], list[str]]:
    """(files, role names) a playbook or task file refers to: imports, includes, templates and roles."""
    clean = strip_yaml_comments(text)
    files = [m.group(1).strip() for m in _ANSIBLE_REF.finditer(clean)]
    roles = [m.group(1) for m in _ROLE_REF.finditer(clean) if "." not in m.group(1) or m.group(1).count(".") >= 2]
    for block in _ROLES_LIST.finditer(clean):
        roles.extend(item.strip().lstrip("-").strip() for item in block.group(1).splitlines() if item.strip())
    return files, roles


GPU_OPERATOR_REFERENCE = re.compile(r"gpu[-_]operator|helm\.ngc\.nvidia\.com|\bkind:\s*[\"']?HelmChart\b(?!Config)", re.I)
