"""The check ServerDiscovery applies to every address it reads from ZooKeeper."""

from __future__ import annotations

import pytest

from canal_core.client.zookeeper import ServerAddressError, check_server_address, parse_allowed

NODE = "/otter/canal/destinations/example/running"


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.7:11111", ("10.0.0.7", 11111)),
    ("[::1]:11111", ("::1", 11111)),
    ("canal-1.example:1", ("canal-1.example", 1)),
    ("localhost:65535", ("localhost", 65535)),
])
def test_sane_addresses_pass(text: str, expected: tuple[str, int]) -> None:
    assert check_server_address(text, NODE) == expected


@pytest.mark.parametrize(("text", "why"), [
    ("10.0.0.7:65536", "port 65536 is outside 1-65535"),
    ("10.0.0.7", "not ip:port"),
    ("10.0.0.7:-1", "not ip:port"),
    ("-bad-.example:11111", "neither an IP address nor a host name"),
    ("a b:11111", "neither an IP address nor a host name"),
    ("ex\u00e4mple:11111", "neither an IP address nor a host name"),
])
def test_bogus_addresses_are_refused_naming_the_node(text: str, why: str) -> None:
    with pytest.raises(ServerAddressError, match=why) as info:
        check_server_address(text, NODE)
    assert str(info.value).startswith(f"{NODE} names {text!r}")


def test_allow_list_of_networks_and_names() -> None:
    allowed = parse_allowed(["10.0.0.0/8", " ::1 ", "Canal-1.example", ""])
    assert check_server_address("10.1.2.3:11111", NODE, allowed) == ("10.1.2.3", 11111)
    assert check_server_address("[::1]:11111", NODE, allowed) == ("::1", 11111)
    assert check_server_address("canal-1.EXAMPLE:11111", NODE, allowed) == ("canal-1.EXAMPLE", 11111)
    for text in ("192.168.0.1:11111", "canal-2.example:11111", "[::2]:11111"):
        with pytest.raises(ServerAddressError, match="outside the allowed servers"):
            check_server_address(text, NODE, allowed)
    with pytest.raises(ValueError, match="'not a host!' is neither a network, an address nor a host name"):
        parse_allowed(["not a host!"])
