"""MySQL length-encoded ("packed") integers."""

from __future__ import annotations


def read_packed(data: bytes, p: int) -> tuple[int, int]:
    """Read a length-encoded integer at p; returns (value, next offset). 251 (NULL) reads as 0."""
    b = data[p]
    if b < 251:
        return b, p + 1
    if b == 252:
        end = p + 3
    elif b == 253:
        end = p + 4
    elif b == 254:
        end = p + 9
    elif b == 251:
        return 0, p + 1
    else:
        raise ValueError(f"invalid length-encoded integer prefix 0xff at offset {p}")
    if end > len(data):
        raise ValueError(f"length-encoded integer at offset {p} runs past the end")
    return int.from_bytes(data[p + 1:end], "little"), end
