"""The one redaction layer for text that leaves rackctl: error messages, event logs, history.

Credentials rackctl loads (a kubeconfig's token, basic-auth password, client key, a password in
a server URL) are ``remember``ed as they are loaded; ``scrub`` replaces each of them, and
anything shaped like a credential (``Bearer ...``, ``Basic ...``, an ``Authorization:`` value,
``user:password@`` in a URL), with ``[redacted]``. A server that echoes the request's
``Authorization`` header into its error answer is thereby cut off too.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import urlsplit, urlunsplit

MASK = "[redacted]"
#: Shorter values are not remembered: replacing them would garble unrelated words of a message.
MIN_SECRET_CHARS = 6
_PATTERNS = (
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=:-]+"), rf"\1\2{MASK}"),
    (re.compile(r"(?i)\b(authorization|proxy-authorization|x-auth-token|cookie|set-cookie)(['\"]?\s*[:=]\s*['\"]?)"
                r"[^'\"\r\n]+"), rf"\1\2{MASK}"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@"), r"\1"),
)
#: A credential as an Authorization header carries it: its scheme, white space, the credential.
_SCHEMED = re.compile(r"(?i)(?:bearer|basic)\s+(\S+)")
_known: set[str] = set()
_lock = threading.Lock()


def remember(*values: object) -> None:
    """Keep every text among ``values`` (and each line of a value of several lines) as a secret
    that ``scrub`` removes; of a credential with its scheme (``Bearer TOKEN``, ``Basic ...``),
    the credential alone too, which a server may quote without the scheme. None, non-text and
    short values are ignored."""
    found = set()
    for value in values:
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not isinstance(value, str):
            continue
        for part in (value, value.strip(), *value.splitlines()):
            part = part.strip()
            schemed = _SCHEMED.fullmatch(part)
            for secret in (part, schemed[1] if schemed else ""):
                if len(secret) >= MIN_SECRET_CHARS:
                    found.add(secret)
    with _lock:
        _known.update(found)


def scrub(text: str) -> str:
    """``text`` with every remembered secret and anything shaped like a credential replaced by
    ``[redacted]``."""
    with _lock:
        known = sorted(_known, key=len, reverse=True)  # a secret that holds another goes first
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def without_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (and without a query, which may carry a token)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # not a URL: shown scrubbed
        return scrub(url)
    if not parts.scheme or not host:
        return scrub(url)
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
