"""Bytes to text: byte-order marks, UTF-8, else the encoding ``charset-normalizer`` finds."""

from __future__ import annotations

from tnsrag_db._loaders.base import _Skip


def _decode_text(data: bytes) -> str:
    """``data`` as text: UTF-8 (with or without BOM), a BOM-marked UTF-16/32, else the
    encoding ``charset-normalizer`` finds. Raises :class:`_Skip` for binary data."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        boms = {b"\xff\xfe\x00\x00": "utf-32", b"\x00\x00\xfe\xff": "utf-32"}
        encoding = boms.get(data[:4], "utf-16")
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            raise _Skip(f"binary (not valid {encoding} despite its byte-order mark)") from None
    if b"\x00" in data[:8192]:
        raise _Skip("binary")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes  # only for text that is not UTF-8 (see pyproject.toml)

    results = from_bytes(data)
    best = results.best()
    if best is not None:
        # On short Western European texts the detector ranks cp1250 and other code pages
        # level with cp1252 (chaos 0 for all) and picks the first, turning "è" into "č":
        # among equally plausible decodings take cp1252, the most common legacy one
        # (what browsers read "latin-1" labels as).
        tied = {m.encoding for m in results if m.chaos <= best.chaos + 0.02} | set(best.could_be_from_charset)
        return data.decode("cp1252", errors="replace") if "cp1252" in tied else str(best)
    # No code page fits without "chaos": read it as cp1252 (it maps all but five byte
    # values) unless it is full of control characters, the mark of binary data.
    text = data.decode("cp1252", errors="replace")
    controls = sum(1 for ch in text if (ord(ch) < 32 and ch not in "\t\n\r\f\v") or ch == "\ufffd")
    if controls > len(text) // 100:
        raise _Skip("binary")
    return text
