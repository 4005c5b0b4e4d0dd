"""What the client authenticates with: an API key, or a workload token its platform gives
it (a Kubernetes projected service-account token the kubelet rewrites before it expires, a
GitHub Actions OIDC token, a client-credentials token), which mcp-connect takes in the
key's place where the tenant trusts its issuer (docs/workload-identity.md). mcp-connect
tells the two apart by shape; either goes as `Authorization: Bearer …`.

A token source is a `TokenFile` (the file read again whenever it changed) or a function
called for each request, plain or `async`, that returns the token (a `str`, or a `Secret`).
The token is read as each request leaves, so a rotated one is used from the next request
on; it is held as a `WorkloadToken`, which never prints.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeAlias

from .errors import WorkloadTokenError
from .secret import ApiKey, Secret, WorkloadToken
from .settings import API_KEY, key_or_token_file

__all__ = ["TokenFile", "TokenFunction", "TokenSource"]

# A function that returns the current workload token, called for each request.
TokenFunction: TypeAlias = Callable[[], str | Secret | Awaitable[str | Secret]]

# A token is one header value: visible ASCII, no white space (RFC 6750's b64token is
# narrower; an opaque client-credentials token may use more of ASCII).
_TOKEN = re.compile(r"[\x21-\x7e]+")
# A token file larger than this holds no token (and is not read whole).
MAX_TOKEN_FILE = 64 * 1024

# The file as last read: inode, modification time (ns) and size.
_Stamp = tuple[int, int, int]


class TokenFile:
    """The workload token in the file at `path` (e.g. a Kubernetes projected
    service-account token, `/var/run/secrets/tokens/mcp-connect`), without surrounding
    white space. Read when first needed and again whenever the file changed: each request
    `stat`s it and compares its inode, modification time and size (the kubelet moves a new
    file into place, by a symlink swap, before the token expires). A file that is missing,
    unreadable, empty or holds no token raises `WorkloadTokenError`, which names the path,
    never the content. Prints as `TokenFile('<path>')`; calling it returns the current
    `WorkloadToken`. Thread-safe; the clients of `with_own_pool` share it."""

    __slots__ = ("_held", "_lock", "_path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = os.fspath(path)
        if not isinstance(path, str) or not path.strip():
            raise TypeError("TokenFile takes the token file's path (a non-empty str or os.PathLike)")
        self._path = path
        self._held: tuple[_Stamp, WorkloadToken] | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return self._path

    def __call__(self) -> WorkloadToken:
        """The current token: the one read before while the file is unchanged, else the
        file read again. Raises `WorkloadTokenError`."""
        try:
            st = os.stat(self._path)
        except OSError as e:
            raise self._unreadable(e) from None
        with self._lock:
            held = self._held
            if held is not None and held[0] == _stamp(st):
                return held[1]
            try:
                with open(self._path, "rb") as f:
                    # The stamp of what is read (the path may change between the two).
                    st = os.fstat(f.fileno())
                    raw = f.read(MAX_TOKEN_FILE + 1)
            except OSError as e:
                raise self._unreadable(e) from None
            what = f"the token file {self._path}"
            if len(raw) > MAX_TOKEN_FILE:
                raise WorkloadTokenError(f"{what} is larger than {MAX_TOKEN_FILE // 1024} KiB: it holds no token")
            try:
                text = raw.decode("ascii")
            except UnicodeDecodeError:
                raise WorkloadTokenError(f"{what} holds no token (it is not ASCII text)") from None
            token = _checked(text, what, f"{what} is empty")
            self._held = (_stamp(st), token)
            return token

    def _unreadable(self, e: OSError) -> WorkloadTokenError:
        return WorkloadTokenError(f"cannot read the token file {self._path}: {e.strerror or type(e).__name__}")

    def __repr__(self) -> str:
        return f"TokenFile({self._path!r})"

    __str__ = __repr__

    def __reduce__(self) -> tuple[type[TokenFile], tuple[str]]:
        # A copy reads the file itself (the lock and the token held stay behind).
        return (TokenFile, (self._path,))


# A token source: `ConnectClient` and `McpConnect` take one in the API key's place.
TokenSource: TypeAlias = TokenFile | TokenFunction


def _stamp(st: os.stat_result) -> _Stamp:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _checked(text: str, what: str, empty: str) -> WorkloadToken:
    text = text.strip()
    if not text:
        raise WorkloadTokenError(empty)
    if not _TOKEN.fullmatch(text):
        raise WorkloadTokenError(f"{what} holds no token (a token is one line of visible ASCII, without spaces)")
    return WorkloadToken(text)


def credential_of(value: object) -> ApiKey | TokenSource:
    """What `ConnectClient` was given as `api_key`: an `ApiKey` (a `str` is wrapped into
    one), a `TokenFile`, or a token function."""
    if isinstance(value, ApiKey):
        return value
    if isinstance(value, str):
        return ApiKey(value)
    if callable(value) and not isinstance(value, Secret):
        return value
    raise TypeError(
        "api_key is an ApiKey or a str, or a token source: a TokenFile, or a function returning the workload token"
    )


def credential_from_env(environ: Mapping[str, str] | None = None) -> ApiKey | TokenFile:
    """`MCP_CONNECT_API_KEY`, else a `TokenFile` of `MCP_CONNECT_TOKEN_FILE`; with neither
    set, `MissingSettingError` naming both."""
    name, value = key_or_token_file(environ)
    return ApiKey(value) if name == API_KEY else TokenFile(value)


def describe(credential: ApiKey | TokenSource) -> str:
    """The credential as a repr may show it: never a secret, nor a function's arguments."""
    if isinstance(credential, ApiKey | TokenFile):
        return repr(credential)
    name = getattr(credential, "__qualname__", None)
    return f"<token function {name if isinstance(name, str) else type(credential).__name__}>"


async def bearer(credential: ApiKey | TokenSource) -> Secret:
    """The bearer for the next request. Raises `WorkloadTokenError` when a token source has
    none (a failing token function's exception is its `__cause__`)."""
    if isinstance(credential, ApiKey):
        return credential
    if isinstance(credential, TokenFile):
        return credential()
    try:
        value = credential()
        if inspect.isawaitable(value):
            value = await value
    except WorkloadTokenError:
        raise
    except Exception as e:
        raise WorkloadTokenError(f"the token function raised {type(e).__name__}") from e
    what = "the token function"
    if isinstance(value, Secret):
        value = value.reveal()
    if not isinstance(value, str):
        raise WorkloadTokenError(f"{what} returned a {type(value).__name__}, not the token (a str)")
    return _checked(value, what, f"{what} returned an empty token")
