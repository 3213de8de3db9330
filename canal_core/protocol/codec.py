"""Canal's TCP wire format, sans-IO: framing, packet building/parsing and GET timeout rules.

Shared by the TCP server (canal_core.server.tcp) and the connectors (canal_core.client); no sockets here.

Framing: every packet, both directions, is a 4-byte big-endian signed length followed by a serialized
``Packet`` (CanalProtocol.proto). ``messages_packet`` writes the MESSAGES reply the way Canal's server
does for raw entries: a Packet with only field 3 (type) and field 5 (body), the body a ``Messages`` that
holds the already-serialized Entry bytes, written without re-encoding them.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence

from .errors import CanalError
from .proto import CanalProtocol_pb2 as cp
from .wire import varint

HEADER = struct.Struct(">i")
VERSION = 1  # the Packet.version Canal's server writes and its clients require in the handshake
# Requests are small (a few strings); anything bigger is a broken or hostile peer. Replies carry whole
# batches and have no limit but the signed 32-bit length, as in Canal.
MAX_REQUEST_FRAME = 16 << 20

PacketType = cp.PacketType
HANDSHAKE = cp.HANDSHAKE
CLIENTAUTHENTICATION = cp.CLIENTAUTHENTICATION
ACK = cp.ACK
SUBSCRIPTION = cp.SUBSCRIPTION
UNSUBSCRIPTION = cp.UNSUBSCRIPTION
GET = cp.GET
MESSAGES = cp.MESSAGES
CLIENTACK = cp.CLIENTACK
SHUTDOWN = cp.SHUTDOWN
DUMP = cp.DUMP
HEARTBEAT = cp.HEARTBEAT
CLIENTROLLBACK = cp.CLIENTROLLBACK

# compressions a Canal client accepts on a MESSAGES packet (Canal's own accepts only these two)
ACCEPTED_COMPRESSIONS = (cp.COMPRESSIONCOMPATIBLEPROTO2, cp.NONE)


class ProtocolError(CanalError):
    """Bytes that are not Canal's protocol: bad frame length, unparsable packet, unexpected type."""


def packet_type_name(t: int) -> str:
    """"GET", "CLIENTACK", ...; Java's name for a number it does not know is UNRECOGNIZED."""
    try:
        return cp.PacketType.Name(t)
    except ValueError:
        return "UNRECOGNIZED"


# ---- framing -------------------------------------------------------------------------------------------


def frame(packet: bytes) -> bytes:
    return HEADER.pack(len(packet)) + packet


class FrameDecoder:
    """Bytes in (any split), whole packets out."""

    def __init__(self, max_frame: int = MAX_REQUEST_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while len(self._buf) >= HEADER.size:
            (n,) = HEADER.unpack_from(self._buf)
            if n < 0 or n > self.max_frame:
                raise ProtocolError(f"frame length {n} out of range (0..{self.max_frame})")
            if len(self._buf) < HEADER.size + n:
                break
            out.append(bytes(self._buf[HEADER.size:HEADER.size + n]))
            del self._buf[:HEADER.size + n]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)


# ---- packets -------------------------------------------------------------------------------------------


def packet(ptype: int, body: bytes = b"") -> bytes:
    """A Packet as Canal's server writes its replies: version 1, the type, the body."""
    return cp.Packet(version=VERSION, type=ptype, body=body).SerializeToString()  # type: ignore[arg-type]


def handshake_packet(seed: bytes) -> bytes:
    return packet(HANDSHAKE, cp.Handshake(seeds=seed).SerializeToString())


def ack_packet() -> bytes:
    return packet(ACK, b"")


def error_packet(code: int, message: str) -> bytes:
    return packet(ACK, cp.Ack(error_code=code, error_message=message).SerializeToString())


_MESSAGES_HEAD = varint(3 << 3 | 0) + varint(MESSAGES) + varint(5 << 3 | 2)  # type=MESSAGES, body: LEN
_BATCH_ID_TAG = varint(1 << 3 | 0)
_ENTRY_TAG = varint(2 << 3 | 2)


def messages_packet(batch_id: int, entries: Sequence[bytes]) -> bytes:
    """The reply to GET. A non-empty batch takes Canal's raw fast path (only Packet fields 3 and 5, Entry
    bytes copied in as they are); an empty one (batch_id -1) is a regular Packet with version 1."""
    if batch_id == -1 or not entries:
        return packet(MESSAGES, cp.Messages(batch_id=batch_id).SerializeToString())
    parts = [_BATCH_ID_TAG, varint(batch_id)]
    for e in entries:
        parts += (_ENTRY_TAG, varint(len(e)), e)
    body = b"".join(parts)
    return b"".join((_MESSAGES_HEAD, varint(len(body)), body))


def parse_packet(data: bytes | bytearray) -> cp.Packet:
    try:
        return cp.Packet.FromString(data)  # type: ignore[arg-type]  # upb parses any buffer; the stubs say bytes
    except Exception as e:  # protobuf's DecodeError, but upb and python raise different classes
        raise ProtocolError(f"not a Canal packet ({len(data)} bytes): {e}") from e


def parse_messages(pkt: cp.Packet) -> tuple[int, list[bytes]]:
    """(batch_id, serialized entries) of a MESSAGES packet; Canal clients accept no compression."""
    if pkt.HasField("compression") and pkt.compression not in ACCEPTED_COMPRESSIONS:
        raise ProtocolError(f"compression {cp.Compression.Name(pkt.compression)} is not supported")
    msgs = cp.Messages.FromString(pkt.body)
    return msgs.batch_id, list(msgs.messages)


# ---- GET timeouts ---------------------------------------------------------------------------------------


class TimeUnit(enum.IntEnum):
    """Get.unit: Java's TimeUnit ordinals."""

    NANOSECONDS = 0
    MICROSECONDS = 1
    MILLISECONDS = 2
    SECONDS = 3
    MINUTES = 4
    HOURS = 5
    DAYS = 6


_UNIT_SECONDS = {0: 1e-9, 1: 1e-6, 2: 1e-3, 3: 1.0, 4: 60.0, 5: 3600.0, 6: 86400.0}


def unit_seconds(unit: int) -> float:
    """Seconds per ``unit``; Canal's server reads an unknown unit as milliseconds."""
    return _UNIT_SECONDS.get(unit, 1e-3)


def get_wait(get: cp.Get) -> float | None:
    """Canal's GET timeout rules as the embedded server's ``timeout`` (seconds):

    timeout == -1: try-get, return at once (0); any other timeout <= 0, including an ABSENT field (proto3
    reads it as 0): block until fetch_size is there (None); timeout > 0: wait up to timeout x unit."""
    t = get.timeout
    if t == -1:
        return 0.0
    if t <= 0:
        return None
    return t * unit_seconds(get.unit)
