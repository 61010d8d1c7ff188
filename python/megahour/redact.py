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

# A secret-looking name inside text: it ends with one of these words (``HF_TOKEN``, ``db_password``,
# ``"api_key"``), so ``tokenizer``, ``max_tokens`` and ``password_file`` are not secrets.
_SECRET_END = re.compile(
    r"(?:token|secret|password|passwd|passphrase|api[_-]?key|apikey|access[_-]?key|private[_-]?key|"
    r"credentials?)$",
    re.IGNORECASE,
)
# A flag that takes a secret: the words above anywhere in it, or ending in -key/_key (``--wandb-key``),
# or --auth.
_SECRET_FLAG = re.compile(
    r"^--?(?:[\w.-]*(?:token|secret|password|passwd|passphrase|api[_-]?key|apikey|access[_-]?key|"
    r"private[_-]?key|credentials?)[\w.-]*|[\w.-]+[_-]key|auth)$",
    re.IGNORECASE,
)
# Query parameters that carry credentials (pre-signed URLs, API tokens).
_SECRET_PARAM = re.compile(
    r"(?:[\w.-]*(?:token|secret|password|passwd|signature|credential|api[_-]?key|apikey)[\w.-]*|sig|key|"
    r"auth|code)",
    re.IGNORECASE,
)

# Every pattern below is linear in the line's length: words are taken whole (possessive ``++``) and only
# where a word starts (the lookbehinds), so a 64 KB log line of base64 costs one pass, not one per offset.
_WORD = r"[A-Za-z0-9_.-]"
_NAME_VALUE = re.compile(
    rf"(?<!{_WORD})(?P<name>{_WORD}++)(?P<sep>[\"']?+[ \t]*+[=:][ \t]*+)"
    r"(?P<value>\"[^\"\n]*+\"?+|'[^'\n]*+'?+|[^\s\"',;&]++)"
)
_FLAG_VALUE = re.compile(rf"(?<!{_WORD})(?P<flag>--?{_WORD}++)(?P<sep>[ \t]++)(?P<value>[^\s-][^\s]*+)")
_PARAM = re.compile(rf"(?P<lead>[?&;])(?P<name>{_WORD}++)=(?P<value>[^&\s#\"']++)")
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*+://[^\s:/@]*+):(?!<redacted>@)[^\s/@]++@"
)


def _redact_quoted(value: str) -> str:
    if value[:1] in "\"'" and value:
        quote = value[0]
        closed = len(value) > 1 and value.endswith(quote)
        return quote + REDACTED + (quote if closed else "")
    return REDACTED


def _name_value(match: re.Match[str]) -> str:
    value = match["value"]
    if not _SECRET_END.search(match["name"]) or value.strip("\"'") in ("", REDACTED):
        return match[0]
    return match["name"] + match["sep"] + _redact_quoted(value)


def _flag_value(match: re.Match[str]) -> str:
    if not _SECRET_FLAG.match(match["flag"]) or match["value"] == REDACTED:
        return match[0]
    return match["flag"] + match["sep"] + REDACTED


def _param(match: re.Match[str]) -> str:
    if not _SECRET_PARAM.fullmatch(match["name"]) or match["value"] == REDACTED:
        return match[0]
    return f"{match['lead']}{match['name']}={REDACTED}"


_PATTERNS: tuple[tuple[re.Pattern[str], str | object], ...] = (
    # PEM private keys, whole blocks (redact_text gets the whole log tail, not line by line); a block
    # cut off by the tail's end goes to the end.
    (
        re.compile(r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.DOTALL),
        f"-----BEGIN \\1PRIVATE KEY-----{REDACTED}-----END \\1PRIVATE KEY-----",
    ),
    # An Authorization header's credential, whatever its scheme (Bearer, Basic, Token, AWS4-HMAC-SHA256).
    (
        re.compile(
            r"(?i)(\bAuthorization[\"']?+[ \t]*+[:=][ \t]*+[\"']?+(?:[A-Za-z0-9-]++[ \t]++)?+)"
            r"(?!<redacted>)[^\s\"']++"
        ),
        f"\\1{REDACTED}",
    ),
    # Bearer and Basic credentials elsewhere (as HTTP spells them: capitalised, then a token).
    (re.compile(r"\b(Bearer|Basic)[ \t]++(?!<redacted>)[A-Za-z0-9._~+/=-]{12,}+"), f"\\1 {REDACTED}"),
    # scheme://user:password@host: userinfo cannot hold '/', '@' or whitespace unescaped.
    (_URL_USERINFO, f"\\1:{REDACTED}@"),
    (_PARAM, _param),
    (_NAME_VALUE, _name_value),
    (_FLAG_VALUE, _flag_value),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}+"), REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}+"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}+"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}+"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}+"), REDACTED),
    (re.compile(r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}+"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"), REDACTED),
    (re.compile(r"(hooks\.slack\.com/services/)[A-Za-z0-9/]++"), f"\\1{REDACTED}"),
)


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
        flag, equals, value = arg.partition("=")
        if equals and value != REDACTED and _SECRET_FLAG.match(flag):  # --wandb-key=VALUE
            out.append(f"{flag}={REDACTED}")
            continue
        out.append(redact_text(arg))
        hide_next = bool(_SECRET_FLAG.match(arg))
    return out
