from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Compression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSIONCOMPATIBLEPROTO2: _ClassVar[Compression]
    NONE: _ClassVar[Compression]
    ZLIB: _ClassVar[Compression]
    GZIP: _ClassVar[Compression]
    LZF: _ClassVar[Compression]

class PacketType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PACKAGETYPECOMPATIBLEPROTO2: _ClassVar[PacketType]
    HANDSHAKE: _ClassVar[PacketType]
    CLIENTAUTHENTICATION: _ClassVar[PacketType]
    ACK: _ClassVar[PacketType]
    SUBSCRIPTION: _ClassVar[PacketType]
    UNSUBSCRIPTION: _ClassVar[PacketType]
    GET: _ClassVar[PacketType]
    MESSAGES: _ClassVar[PacketType]
    CLIENTACK: _ClassVar[PacketType]
    SHUTDOWN: _ClassVar[PacketType]
    DUMP: _ClassVar[PacketType]
    HEARTBEAT: _ClassVar[PacketType]
    CLIENTROLLBACK: _ClassVar[PacketType]
COMPRESSIONCOMPATIBLEPROTO2: Compression
NONE: Compression
ZLIB: Compression
GZIP: Compression
LZF: Compression
PACKAGETYPECOMPATIBLEPROTO2: PacketType
HANDSHAKE: PacketType
CLIENTAUTHENTICATION: PacketType
ACK: PacketType
SUBSCRIPTION: PacketType
UNSUBSCRIPTION: PacketType
GET: PacketType
MESSAGES: PacketType
CLIENTACK: PacketType
SHUTDOWN: PacketType
DUMP: PacketType
HEARTBEAT: PacketType
CLIENTROLLBACK: PacketType

class Packet(_message.Message):
    __slots__ = ("magic_number", "version", "type", "compression", "body")
    MAGIC_NUMBER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    magic_number: int
    version: int
    type: PacketType
    compression: Compression
    body: bytes
    def __init__(self, magic_number: _Optional[int] = ..., version: _Optional[int] = ..., type: _Optional[_Union[PacketType, str]] = ..., compression: _Optional[_Union[Compression, str]] = ..., body: _Optional[bytes] = ...) -> None: ...

class HeartBeat(_message.Message):
    __slots__ = ("send_timestamp", "start_timestamp")
    SEND_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    send_timestamp: int
    start_timestamp: int
    def __init__(self, send_timestamp: _Optional[int] = ..., start_timestamp: _Optional[int] = ...) -> None: ...

class Handshake(_message.Message):
    __slots__ = ("communication_encoding", "seeds", "supported_compressions")
    COMMUNICATION_ENCODING_FIELD_NUMBER: _ClassVar[int]
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_COMPRESSIONS_FIELD_NUMBER: _ClassVar[int]
    communication_encoding: str
    seeds: bytes
    supported_compressions: Compression
    def __init__(self, communication_encoding: _Optional[str] = ..., seeds: _Optional[bytes] = ..., supported_compressions: _Optional[_Union[Compression, str]] = ...) -> None: ...

class ClientAuth(_message.Message):
    __slots__ = ("username", "password", "net_read_timeout", "net_write_timeout", "destination", "client_id", "filter", "start_timestamp")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    NET_READ_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    NET_WRITE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    username: str
    password: bytes
    net_read_timeout: int
    net_write_timeout: int
    destination: str
    client_id: str
    filter: str
    start_timestamp: int
    def __init__(self, username: _Optional[str] = ..., password: _Optional[bytes] = ..., net_read_timeout: _Optional[int] = ..., net_write_timeout: _Optional[int] = ..., destination: _Optional[str] = ..., client_id: _Optional[str] = ..., filter: _Optional[str] = ..., start_timestamp: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ClientAck(_message.Message):
    __slots__ = ("destination", "client_id", "batch_id")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    destination: str
    client_id: str
    batch_id: int
    def __init__(self, destination: _Optional[str] = ..., client_id: _Optional[str] = ..., batch_id: _Optional[int] = ...) -> None: ...

class Sub(_message.Message):
    __slots__ = ("destination", "client_id", "filter")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    destination: str
    client_id: str
    filter: str
    def __init__(self, destination: _Optional[str] = ..., client_id: _Optional[str] = ..., filter: _Optional[str] = ...) -> None: ...

class Unsub(_message.Message):
    __slots__ = ("destination", "client_id", "filter")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    destination: str
    client_id: str
    filter: str
    def __init__(self, destination: _Optional[str] = ..., client_id: _Optional[str] = ..., filter: _Optional[str] = ...) -> None: ...

class Get(_message.Message):
    __slots__ = ("destination", "client_id", "fetch_size", "timeout", "unit", "auto_ack")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    FETCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    AUTO_ACK_FIELD_NUMBER: _ClassVar[int]
    destination: str
    client_id: str
    fetch_size: int
    timeout: int
    unit: int
    auto_ack: bool
    def __init__(self, destination: _Optional[str] = ..., client_id: _Optional[str] = ..., fetch_size: _Optional[int] = ..., timeout: _Optional[int] = ..., unit: _Optional[int] = ..., auto_ack: _Optional[bool] = ...) -> None: ...

class Messages(_message.Message):
    __slots__ = ("batch_id", "messages")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    messages: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, batch_id: _Optional[int] = ..., messages: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Dump(_message.Message):
    __slots__ = ("journal", "position", "timestamp")
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    journal: str
    position: int
    timestamp: int
    def __init__(self, journal: _Optional[str] = ..., position: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class ClientRollback(_message.Message):
    __slots__ = ("destination", "client_id", "batch_id")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    destination: str
    client_id: str
    batch_id: int
    def __init__(self, destination: _Optional[str] = ..., client_id: _Optional[str] = ..., batch_id: _Optional[int] = ...) -> None: ...
