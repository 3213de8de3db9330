"""Canal's password scheme (docs/canal-compat.md §1.5): the test vector, the stored hashes, and the server's
rules for canal.user / canal.passwd."""

from __future__ import annotations

import pytest

from canal_core.protocol.auth import check_scramble, scramble, stored_hash
from canal_core.server.auth import AuthConfigError, Authenticator

SEED = bytes(range(1, 9))  # 01..08
CANAL_HASH = "E3619321C1A937C46A0D8BD1DAC39F93B27D4458"
ADMIN_HASH = "4ACFE3202A5FF5CF467898FC58AAB1D615029441"


def test_vector_and_stored_hashes() -> None:
    assert scramble("canal", SEED) == "7de44690d8e53782cb61804a2455c284a3bbfb06"
    assert stored_hash("canal") == CANAL_HASH
    assert stored_hash("admin") == ADMIN_HASH
    assert scramble("", SEED) == ""


def test_server_check() -> None:
    token = "7de44690d8e53782cb61804a2455c284a3bbfb06"
    assert check_scramble(token, SEED, CANAL_HASH)
    assert check_scramble(token.upper(), SEED, CANAL_HASH.lower())  # hex case does not matter
    assert not check_scramble(token, bytes(8), CANAL_HASH)  # another seed: no replay
    assert not check_scramble(token, SEED, ADMIN_HASH)
    assert not check_scramble(scramble("admin", SEED), SEED, CANAL_HASH)
    assert check_scramble(scramble("admin", b"\xff" * 8), b"\xff" * 8, ADMIN_HASH)
    assert not check_scramble("canal", SEED, CANAL_HASH)  # sent unscrambled (canal-python)
    assert not check_scramble(token[:-2], SEED, CANAL_HASH)
    assert not check_scramble("", SEED, CANAL_HASH)


def test_rules_without_password() -> None:
    auth = Authenticator("", "")
    assert not auth.enabled
    for user, pw in (("", ""), ("anyone", "whatever"), ("canal", scramble("canal", SEED))):
        assert auth.authenticate(user, pw, SEED)


def test_rules_with_user_and_password() -> None:
    auth = Authenticator("canal", CANAL_HASH)
    assert auth.enabled
    assert auth.authenticate("canal", scramble("canal", SEED), SEED)
    assert not auth.authenticate("canal", "", SEED)  # empty client password refused when one is set
    assert not auth.authenticate("canal", scramble("admin", SEED), SEED)
    assert not auth.authenticate("other", scramble("canal", SEED), SEED)  # canal.user set: names must match
    assert not auth.authenticate("", scramble("canal", SEED), SEED)


def test_rules_with_password_only() -> None:
    auth = Authenticator("", ADMIN_HASH.lower())  # canal.user empty: any username, the password checked
    assert auth.authenticate("anyone", scramble("admin", SEED), SEED)
    assert not auth.authenticate("anyone", "", SEED)
    assert not auth.authenticate("anyone", scramble("canal", SEED), SEED)


def test_user_without_password_is_a_startup_error() -> None:
    with pytest.raises(AuthConfigError, match=r"canal\.user = canal needs canal\.passwd"):
        Authenticator("canal", "")
    with pytest.raises(AuthConfigError, match="40 hex digits"):
        Authenticator("", "E3619321")
