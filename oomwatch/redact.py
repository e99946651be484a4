"""Secrets-shaped arguments hidden from a command line before it is shown or written for people.

A command line is quoted in ``oomwatch run``'s diagnosis and in its ``--report``, which are made to be
pasted into issues. What is hidden, the name kept so that the reader sees what was passed:

- a flag whose name has a secret word in it (split on ``-``, ``_``, ``.`` and camelCase: ``key``,
  ``apikey``, ``token``, ``secret``, ``password``, ``passwd``, ``pwd``, ``auth``, ``authorization``,
  ``credential(s)``, ``bearer``): ``--api-key=<redacted>``, and ``--token <redacted>`` when its value
  is the next argument (one that does not start with ``-``);
- ``NAME=VALUE`` (an environment variable for ``env``, a Hydra override) whose name has one:
  ``HF_TOKEN=<redacted>``, ``wandb.api_key=<redacted>``;
- a header-like argument: ``Authorization: <redacted>``, ``X-Api-Key: <redacted>``, and the word
  after ``Bearer`` in any argument;
- the password of a URL: ``https://user:<redacted>@host/``.

Whole words only, so that ``--keep_in_memory``, ``--max-tokens``, ``--tokenizer`` and ``--monkey``
stay. A tokenizer's special tokens (``--pad-token-id``, ``--eos_token``) and names of files or ids
of a secret (``--key-file``, ``--secret-name``) are no secrets. Only what is shown is redacted: the
command that runs, and the flags the code rules read, are the real ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

REDACTED = "<redacted>"

_SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "auth", "authorization",
    "credential", "credentials", "bearer",
})  # fmt: skip
# a word after the secret word that makes the value something else: a path, a name, an id, a count
_NOT_SECRET_AFTER = frozenset({"file", "path", "dir", "name", "id", "ids", "len", "length", "count", "size",
                               "type", "index", "env", "var"})  # fmt: skip
# a tokenizer's special tokens are strings like </s>, not credentials
_NOT_SECRET_TOKEN_BEFORE = frozenset({"pad", "eos", "bos", "unk", "sep", "cls", "mask", "special", "start", "end"})

_FLAG = re.compile(r"^(-{1,2}[A-Za-z][\w.-]*)(=(.*))?$", re.DOTALL)
_ASSIGNMENT = re.compile(r"^(\+{0,2}[A-Za-z_][\w.-]*)=(.*)$", re.DOTALL)
_HEADER = re.compile(r"^(\s*[A-Za-z][A-Za-z0-9-]*\s*:\s*)(\S.*)$", re.DOTALL)
_BEARER = re.compile(r"\b(Bearer)(\s+)[^\s,;]+", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+(@)")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def _words(name: str) -> list[str]:
    """``--hfApiKey`` -> ``["hf", "api", "key"]``; ``WANDB_API_KEY`` -> ``["wandb", "api", "key"]``."""
    return [w.lower() for part in re.split(r"[-_.+]+", name) for w in _WORD.findall(part)]


def secret_name(name: str) -> bool:
    """Whether a flag, variable or header called ``name`` carries a secret as its value."""
    words = _words(name)
    for i, word in enumerate(words):
        if word not in _SECRET_WORDS:
            continue
        after = words[i + 1] if i + 1 < len(words) else None
        if after in _NOT_SECRET_AFTER:
            continue
        if word == "token" and i > 0 and words[i - 1] in _NOT_SECRET_TOKEN_BEFORE:
            continue
        return True
    return False


def _redact_text(arg: str) -> str:
    """Secrets inside one argument or flag value: a header's value, a URL's password, a bearer token."""
    header = _HEADER.match(arg)
    if header is not None and secret_name(header.group(1).strip().rstrip(":").strip()):
        return f"{header.group(1)}{REDACTED}"
    arg = _URL_PASSWORD.sub(rf"\1{REDACTED}\2", arg)
    return _BEARER.sub(rf"\1\2{REDACTED}", arg)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with every secrets-shaped value replaced by ``<redacted>`` (see the module's doc)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("-"):
                out.append(REDACTED)
                continue
        flag = _FLAG.match(arg)
        if flag is not None:
            if secret_name(flag.group(1)):
                if flag.group(2) is None:
                    hide_next = True
                    out.append(arg)
                else:
                    out.append(f"{flag.group(1)}={REDACTED}")
                continue
            if flag.group(2) is not None:
                out.append(f"{flag.group(1)}={_redact_text(flag.group(3))}")
                continue
            out.append(arg)
            continue
        assignment = _ASSIGNMENT.match(arg)
        if assignment is not None and secret_name(assignment.group(1)):
            out.append(f"{assignment.group(1)}={REDACTED}")
            continue
        out.append(_redact_text(arg))
    return out
