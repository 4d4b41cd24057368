"""Turn whatever a sampler produced into text that every scorer can handle."""

from __future__ import annotations

__all__ = ["as_text"]


def as_text(response: str | bytes) -> str:
    """``response`` as a ``str`` that encodes to UTF-8, so scoring never crashes on it.

    Bytes are decoded as UTF-8 with invalid sequences replaced by U+FFFD. In a ``str``,
    lone surrogates (left by ``surrogateescape`` decoding, or by a detokenizer that cut
    a surrogate pair in half) are replaced by U+FFFD, because they make every UTF-8
    encode raise: in logging, JSON, files, and in scorers that encode. Surrogate
    *pairs* are joined into the character they stand for.

    Raises:
        TypeError: ``response`` is neither ``str`` nor ``bytes``.
    """
    if isinstance(response, bytes):
        return response.decode("utf-8", errors="replace")
    if isinstance(response, str):
        # UTF-16 is the one codec whose "surrogatepass" round trip pairs up valid
        # surrogate pairs and leaves only the lone ones for "replace" to swap out.
        return response.encode("utf-16", errors="surrogatepass").decode("utf-16", errors="replace")
    raise TypeError(f"response must be str or bytes, got {type(response).__name__}")
