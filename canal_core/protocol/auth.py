"""Canal's client password scheme, both sides (MySQL 4.1 "scramble411" applied to Canal's handshake seed).

canal.passwd stores hex(SHA1(SHA1(plain))) (MySQL's PASSWORD() without the '*'), so the server never holds
the plain password. The server sends 8 random seed bytes in the handshake; the client answers with

    token = SHA1(seed + SHA1(SHA1(pw))) XOR SHA1(pw)        (sent as lowercase hex, UTF-8 bytes)

and the server, knowing only stored = SHA1(SHA1(pw)), recovers SHA1(pw) = token XOR SHA1(seed + stored)
and checks SHA1(that) == stored. A token is only good for the seed it was made with (no replay).
"""

from __future__ import annotations

import hashlib
import hmac

HASH_LEN = 20  # SHA-1


def _sha1(*parts: bytes) -> bytes:
    h = hashlib.sha1()
    for p in parts:
        h.update(p)
    return h.digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def stored_hash(password: str) -> str:
    """The canal.passwd value for a plain password: upper-case hex of SHA1(SHA1(password))."""
    return _sha1(_sha1(password.encode("utf-8"))).hex().upper()


def scramble(password: str, seed: bytes) -> str:
    """The client's token for ``password`` and the handshake ``seed``: lowercase hex, as Canal's
    connector sends it (ClientAuth.password holds the UTF-8 bytes of this text). Empty password: empty
    token (Canal's connector sends nothing then)."""
    if not password:
        return ""
    stage1 = _sha1(password.encode("utf-8"))
    return _xor(_sha1(seed, _sha1(stage1)), stage1).hex()


def check_scramble(token_hex: str, seed: bytes, stored_hex: str) -> bool:
    """Server side: does ``token_hex`` prove knowledge of the password whose canal.passwd is ``stored_hex``?"""
    try:
        token = bytes.fromhex(token_hex)
        stored = bytes.fromhex(stored_hex)
    except ValueError:  # e.g. a client that sends its password unscrambled (canal-python)
        return False
    if len(token) != HASH_LEN or len(stored) != HASH_LEN:
        return False
    stage1 = _xor(token, _sha1(seed, stored))
    return hmac.compare_digest(_sha1(stage1), stored)
