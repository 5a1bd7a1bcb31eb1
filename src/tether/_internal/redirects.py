"""The API adapters follow no HTTP redirect: a request goes to ``base_url`` or nowhere.

The SDKs' own HTTP clients follow redirects, and a 307 or 308 re-sends the whole POST: a base
URL that answered with another host's address sent the prompt and the tools' results there,
with Anthropic's ``x-api-key`` (the HTTP library strips only ``Authorization``). The
adapters give the SDK a client that follows none, to another host or on the same one: an API
that answers a request with a redirect is a ``base_url`` to correct, and the error says which
address the server named. The address shown is scheme, host, port and path: a redirect's query
string, fragment or ``user:password@`` can carry a key or a signature (``?key=...``, a signed
URL) that the redaction patterns need not recognise, so the message leaves them out and says so.
An ``http_client`` or a ``client`` the caller passes in keeps its
own settings (``httpx2``'s default follows none; the SDKs' follows all).
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit, urlunsplit

from tether.errors import ModelError

__all__ = ["refused_redirect"]


def refused_redirect(
    name: str, *, status: int, url: str, location: str | None, base_url: str, who: str = ""
) -> ModelError:
    """The error for a redirect not followed: where it pointed, and the ``base_url`` to set.

    Args:
        name: The model's name.
        status: The HTTP status (3xx).
        url: The request's URL.
        location: The response's ``Location`` header, if any.
        base_url: The client's base URL, which ``url`` is under.
        who: What made the request, as the message names it (default: ``name``).
    """
    said = f"{who or name}: {_origin(url)} answered HTTP {status}"
    if not location:
        return ModelError(
            f"{said} (a redirect without an address); check base_url",
            model=name,
            status_code=status,
        )
    try:
        target = urljoin(url, location)
        elsewhere = _elsewhere(target, url)
    except ValueError:  # "http://[bad": not an address; not echoed (it may hold a token)
        return ModelError(
            f"{said} with a redirect to an address that is not a URL; it was not followed; "
            "check base_url",
            model=name,
            status_code=status,
        )
    shown, hidden = _shown(target)
    if hidden:
        elsewhere += f"; its {_listed(hidden)} left out"
    fix = _base_url_for(target, url=url, base_url=base_url)
    advice = f"set base_url to {fix}" if fix else "set base_url to the API's own address"
    return ModelError(
        f"{said} with a redirect to {shown} ({elsewhere}); it was not followed (the request "
        f"carries the prompt and the API key, and goes only to base_url): if that is where the "
        f"API lives, {advice}",
        model=name,
        status_code=status,
    )


def _elsewhere(target: str, url: str) -> str:
    """How ``target`` differs from ``url``, in a few words."""
    if urlsplit(target).hostname != urlsplit(url).hostname:
        return "another host"
    if _origin(target) != _origin(url):
        return "another scheme or port"
    return "the same host"


def _origin(url: str) -> str:
    """Scheme, host and port: where a URL's requests go (without any ``user:password@``)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{_host_port(parts.netloc)}".lower()


def _host_port(netloc: str) -> str:
    """``netloc`` without its userinfo: ``user:pass@host:8080`` is ``host:8080``."""
    return netloc.rpartition("@")[2]


def _shown(url: str) -> tuple[str, list[str]]:
    """``url`` as an error may show it, and the names of the parts it leaves out.

    Only scheme, host, port and path are shown: the query string, the fragment, the path's
    ``;parameters`` and the userinfo are where a redirect carries a token or a signature.
    """
    parts = urlsplit(url)
    host_port = _host_port(parts.netloc)
    hidden: list[str] = []
    if host_port != parts.netloc:
        hidden.append("user name and password")
    if parts.query:
        hidden.append("query string")
    if parts.fragment:
        hidden.append("fragment")
    path, semicolon, _ = parts.path.partition(";")  # ``;sig=...``: a path's parameters
    if semicolon:
        hidden.append("path parameters")
    return urlunsplit((parts.scheme, host_port, path, "", "")), hidden


def _listed(names: list[str]) -> str:
    """``["a", "b", "c"]`` as ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _base_url_for(target: str, *, url: str, base_url: str) -> str | None:
    """The base URL under which ``target`` is the same endpoint as ``url`` (``None``: none)."""
    base_path = urlsplit(base_url).path.rstrip("/")
    path = urlsplit(url).path
    if not path.startswith(base_path):
        return None
    endpoint = path[len(base_path) :]  # "/chat/completions"
    where = urlsplit(target)
    if not endpoint or not where.path.endswith(endpoint):
        return None
    new_path = where.path[: len(where.path) - len(endpoint)]
    return urlunsplit((where.scheme, _host_port(where.netloc), new_path, "", ""))
