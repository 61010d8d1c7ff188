"""Credentials out of text that megahour keeps (run traces, logs, recorded commands).

What is redacted, keeping enough around it to debug:
- the password in a URL's userinfo (``scheme://user:<redacted>@host``);
- the value of a query parameter that carries a credential (``?token=``, ``X-Amz-Signature=``, ...);
- the value after a secret-named key (``AWS_SECRET_ACCESS_KEY=...``, ``--password=...``,
  ``"api_key": "..."``), and the argument after a secret-named flag in a command line;
- known token shapes wherever they stand: AWS access key ids, GitHub, Hugging Face, Slack, OpenAI-style
  ``sk-`` keys, JWTs, ``Bearer``/``Basic`` credentials, Slack webhook paths and PEM private keys.

Pure functions, no I/O. Redaction is idempotent: redacting a redacted text changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "<redacted>"

# An environment variable or flag whose name says it holds a secret: its whole value goes.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|KEY|AUTH", re.IGNORECASE)

# A secret-looking name inside text or a flag: one of these words, or a name ending in "key" after a
# separator (``wandb-key``, ``ssh_key``; a bare ``key`` is too common a word to count).
_NAME_WORDS = (
    r"(?:[A-Za-z0-9_.-]*(?:token|secret|password|passwd|passphrase|api[_-]?key|access[_-]?key|"
    r"private[_-]?key)[A-Za-z0-9_.-]*|[A-Za-z0-9_.-]+[_-]key)"
)

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys, whole blocks (a log may print one across lines).
    (
        re.compile(r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.DOTALL),
        f"-----BEGIN \\1PRIVATE KEY-----{REDACTED}-----END \\1PRIVATE KEY-----",
    ),
    # scheme://user:password@host: userinfo cannot hold '/', '@' or whitespace unescaped.
    (re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):(?!<redacted>@)[^\s/@]+@"), f"\\1:{REDACTED}@"),
    # Query parameters that carry credentials (pre-signed URLs, API tokens).
    (
        re.compile(
            r"([?&;](?:[A-Za-z0-9_.-]*(?:token|secret|password|passwd|signature|credential|api[_-]?key|apikey)"
            r"[A-Za-z0-9_.-]*|sig|key|auth|code)=)(?!<redacted>)[^&\s#\"']+",
            re.IGNORECASE,
        ),
        f"\\1{REDACTED}",
    ),
    # NAME=value, NAME: value, "name": "value", --name=value, with a secret-looking name. A plain number
    # stays: logs print "tokens: 2048" and "max_tokens=4096", and those are figures, not secrets.
    (
        re.compile(
            r"(\b" + _NAME_WORDS + r"[\"']?\s*(?:=|:)\s*[\"']?)(?!<redacted>)(?![\d.,]+(?:[\s\"',;&]|$))"
            r"([^\s\"',;&]+)",
            re.IGNORECASE,
        ),
        f"\\1{REDACTED}",
    ),
    (
        re.compile(r"\b(Bearer|Basic|Token)\s+(?!<redacted>)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE),
        f"\\1 {REDACTED}",
    ),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}\b"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"(hooks\.slack\.com/services/)[A-Za-z0-9/]+"), f"\\1{REDACTED}"),
)

_SECRET_FLAG = re.compile(r"^--?" + _NAME_WORDS + r"$", re.IGNORECASE)


def redact_text(text: str) -> str:
    """``text`` with every credential this module knows the shape of replaced by ``<redacted>``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment, sorted, with secret-named variables' values gone and the rest redacted as text
    (a URL with a password in ``DATABASE_URL`` keeps its host)."""
    return {k: (REDACTED if SECRET_NAME.search(k) else redact_text(v)) for k, v in sorted(env.items())}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with each argument redacted as text and the argument after a secret-named flag
    (``--password hunter2``, ``--hf-token X``) replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        out.append(redact_text(arg))
        hide_next = bool(_SECRET_FLAG.match(arg))
    return out
