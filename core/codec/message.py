"""The machinery every message shares: a field's wire type is declared in its annotation, and
:func:`codec` turns a frozen dataclass into an SBE-style encoder/decoder.

Layout of a message (docs/protocol.md c.0): 8-byte header, fixed block (fields in declaration order,
little-endian, no padding), then the repeating groups and variable fields in declaration order.
A variable field is a u32 length followed by that many bytes; a group is {u16 block_length,
u16 num_in_group} followed by the entries, each a fixed block and its own variable fields.

Field annotations (``typing.Annotated``, so type checkers see plain ``int``/``str``/``bytes``)::

    log_position: Int64            # int64
    follower_member_id: Int32      # int32
    flags: UInt8                   # uint8
    protocol_version: VersionT     # int32 semantic version, shown as major.minor.patch
    vote: Annotated[BooleanType, ENUM32]   # int32 enum, decoded to the IntEnum member
    detail: AsciiVar               # var data, str, must be ASCII
    payload: DataVar               # var data, bytes
    active_members: Annotated[tuple[Entry, ...], Group(Entry)]   # repeating group
    payload: Payload               # SessionMessageHeader only: every byte after the block

Errors: construction with a value that cannot be encoded is misuse and raises ValueError (out of
range, not ASCII, not an enum value) or TypeError (wrong type). Bytes that cannot be decoded raise
:class:`DecodeError` naming the message and the problem, never anything else.

Speed: :meth:`Message.encode` and :meth:`Message.decode` below are the reference implementation,
table-driven. :func:`codec` installs per-class straight-line versions generated from the same
tables (as dataclasses generates ``__init__``; see ``Cls._SOURCE``), which run 2-3x faster; the
tests check both produce the same bytes and messages. Every decode error still comes from the
reference path: the generated decode hands anything unusual to ``_decode_checked``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import IntEnum
from operator import attrgetter
from typing import Annotated, Any, ClassVar, Self, TypeVar, cast, get_args, get_origin, get_type_hints

from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.header import HEADER, HEADER_LENGTH, SCHEMA_ID, SCHEMA_VERSION

U32 = struct.Struct("<I")
GROUP_HEADER = struct.Struct("<HH")
U32_MAX = 0xFFFF_FFFF
U16_MAX = 0xFFFF

_RANGES: dict[str, tuple[int, int, str]] = {
    "q": (-(2**63), 2**63 - 1, "int64"),
    "i": (-(2**31), 2**31 - 1, "int32"),
    "B": (0, 0xFF, "uint8"),
    "H": (0, 0xFFFF, "uint16"),
}


class Fixed:
    """Annotation marker: a fixed-block field with struct format ``fmt``."""

    __slots__ = ("fmt", "is_version")

    def __init__(self, fmt: str, *, is_version: bool = False) -> None:
        if fmt not in _RANGES:
            raise ValueError(f"unsupported fixed field format {fmt!r}")
        self.fmt = fmt
        self.is_version = is_version


class VarAscii:
    """Annotation marker: ``varAsciiEncoding`` data (u32 length + ASCII bytes), a ``str``."""

    __slots__ = ()


class VarData:
    """Annotation marker: ``varDataEncoding`` data (u32 length + bytes), a ``bytes``."""

    __slots__ = ()


class Tail:
    """Annotation marker: every byte after the fixed block (SessionMessageHeader's payload)."""

    __slots__ = ()


class Group:
    """Annotation marker: a repeating group of ``entry`` (a :class:`GroupEntry` dataclass)."""

    __slots__ = ("entry",)

    def __init__(self, entry: type[GroupEntry]) -> None:
        self.entry = entry


Int64 = Annotated[int, Fixed("q")]
Int32 = Annotated[int, Fixed("i")]
UInt8 = Annotated[int, Fixed("B")]
TimeT = Annotated[int, Fixed("q")]  # time_t: cluster time units (see ClusterTimeUnit)
VersionT = Annotated[int, Fixed("i", is_version=True)]  # (major << 16) | (minor << 8) | patch, null 0
ENUM32 = Fixed("i")  # use as Annotated[SomeIntEnum, ENUM32]
AsciiVar = Annotated[str, VarAscii()]
DataVar = Annotated[bytes, VarData()]
Payload = Annotated[bytes, Tail()]

# Tail kinds, compared by identity in the per-message loops.
_ASCII = "ascii"
_DATA = "data"
_GROUP = "group"
_TAIL = "tail"

_set = object.__setattr__
_T = TypeVar("_T", bound=type)


def format_version(version: int) -> str:
    """A ``version_t`` as ``major.minor.patch``."""
    return f"{(version >> 16) & 0xFF}.{(version >> 8) & 0xFF}.{version & 0xFF}"


def describe_bytes(value: bytes, prefix: int = 8) -> str:
    """Bytes in a describe() line: length and a short hex prefix, e.g. ``64B:0a0b0c0d0e0f1011...``."""
    if not value:
        return "0B"
    more = "..." if len(value) > prefix else ""
    return f"{len(value)}B:{value[:prefix].hex()}{more}"


class _Encodable:
    """Shared base of :class:`Message` and :class:`GroupEntry`; attributes are filled in by :func:`codec`."""

    __slots__ = ()

    BLOCK_LENGTH: ClassVar[int]
    _BLOCK: ClassVar[struct.Struct]  # the fixed block alone
    _get_fixed: ClassVar[Callable[[Any], tuple[Any, ...]]]
    _get_tails: ClassVar[Callable[[Any], tuple[Any, ...]]]
    _FIXED: ClassVar[tuple[tuple[str, str], ...]]  # (name, struct format)
    _ENUMS: ClassVar[tuple[tuple[int, str, type[IntEnum], dict[int, IntEnum]], ...]]
    _TAILS: ClassVar[tuple[tuple[str, str, Any], ...]]  # (name, kind, group entry class or None)
    _DESCRIBE: ClassVar[tuple[tuple[str, str], ...]]  # (name, how)
    _make: ClassVar[Callable[..., Any]]  # builds an instance without validation (decode only)

    def __post_init__(self) -> None:
        # Cheap checks only: one C-level struct.pack validates every fixed int's range at once.
        cls = type(self)
        for _index, name, enum_cls, table in cls._ENUMS:
            value = getattr(self, name)
            if type(value) is not enum_cls:
                member = table.get(value) if isinstance(value, int) else None
                if member is None:
                    raise ValueError(f"{cls.__name__}.{name}={value!r} is not a {enum_cls.__name__}")
                _set(self, name, member)
        try:
            cls._BLOCK.pack(*cls._get_fixed(self))
        except struct.error:
            _explain_fixed(self)
        for name, kind, entry in cls._TAILS:
            value = getattr(self, name)
            if kind is _ASCII:
                if type(value) is not str:
                    raise TypeError(f"{cls.__name__}.{name}: expected str, got {type(value).__name__}")
                if not value.isascii():
                    raise ValueError(f"{cls.__name__}.{name}={value!r} is not ASCII")
                if len(value) > U32_MAX:
                    raise ValueError(f"{cls.__name__}.{name}: {len(value)} bytes exceeds uint32 length")
            elif kind is _GROUP:
                if type(value) is not tuple:
                    if not isinstance(value, list | tuple):
                        raise TypeError(f"{cls.__name__}.{name}: expected a tuple of {entry.__name__}")
                    value = tuple(value)
                    _set(self, name, value)
                if len(value) > U16_MAX:
                    raise ValueError(f"{cls.__name__}.{name}: {len(value)} entries exceeds uint16 count")
                for item in value:
                    if type(item) is not entry:
                        raise TypeError(f"{cls.__name__}.{name}: expected {entry.__name__}, got {item!r}")
            else:
                if type(value) is not bytes:
                    if not isinstance(value, bytearray | memoryview):
                        raise TypeError(f"{cls.__name__}.{name}: expected bytes, got {type(value).__name__}")
                    value = bytes(value)
                    _set(self, name, value)
                if kind is _DATA and len(value) > U32_MAX:
                    raise ValueError(f"{cls.__name__}.{name}: {len(value)} bytes exceeds uint32 length")

    def describe(self) -> str:
        """One canonical line: ``Name(field=value ...)``; enums by name, versions as x.y.z."""
        parts = []
        for name, how in type(self)._DESCRIBE:
            value = getattr(self, name)
            if how == "int":
                text = str(value)
            elif how == "enum":
                text = value.name
            elif how == "version":
                text = format_version(value)
            elif how == "str":
                text = repr(value)
            elif how == "bytes":
                text = describe_bytes(value)
            else:
                text = "[" + ", ".join(item.describe() for item in value) + "]"
            parts.append(f"{name}={text}")
        return f"{type(self).__name__}({' '.join(parts)})"

    def _encode_into(self, parts: list[bytes]) -> None:
        """Append the fixed block and the tails (groups / vars), for group entries."""
        cls = type(self)
        parts.append(cls._BLOCK.pack(*cls._get_fixed(self)))
        if cls._TAILS:
            _encode_tails(cls._TAILS, cls._get_tails(self), parts)


class Message(_Encodable):
    """Base of every schema-111 message: header + fixed block + groups/vars."""

    __slots__ = ()

    TEMPLATE_ID: ClassVar[int]
    _FULL: ClassVar[struct.Struct]  # header + fixed block
    _HEAD: ClassVar[tuple[int, int, int, int]]
    _KEY: ClassVar[tuple[int, int, int]]  # (block_length, template_id, schema_id) of our own layout
    _SOURCE: ClassVar[str]  # the generated encode/decode

    def encode(self) -> bytes:
        """Header + fixed block + groups/vars (reference version; see the module docstring)."""
        cls = type(self)
        head = cls._FULL.pack(*cls._HEAD, *cls._get_fixed(self))
        if not cls._TAILS:
            return head
        parts = [head]
        _encode_tails(cls._TAILS, cls._get_tails(self), parts)
        return b"".join(parts)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> Self:
        """Decode one whole message; raises DecodeError on any malformed input (reference version)."""
        if type(buf) is not bytes:
            buf = bytes(buf)
        n = len(buf)
        full = cls._FULL
        if n >= full.size:
            values = full.unpack_from(buf)
            # Fast path: the sender used our block_length (the common case), so header + block
            # unpack in one call. Anything else takes the fully checked path below.
            if values[:3] == cls._KEY:
                return cls._finish(buf, n, full.size, values[4:])
        return cls._decode_checked(buf, n)

    @classmethod
    def _decode_checked(cls, buf: bytes, n: int) -> Self:
        if n < HEADER_LENGTH:
            raise DecodeError(cls.__name__, f"truncated header: {n} of {HEADER_LENGTH} bytes")
        block_length, template_id, schema_id, _version = HEADER.unpack_from(buf)
        if template_id != cls.TEMPLATE_ID:
            raise DecodeError(cls.__name__, f"template id {template_id}, expected {cls.TEMPLATE_ID}")
        if schema_id != SCHEMA_ID:
            raise DecodeError(cls.__name__, f"schema id {schema_id}, expected {SCHEMA_ID}")
        if block_length < cls.BLOCK_LENGTH:
            raise DecodeError(cls.__name__, f"block_length {block_length} < {cls.BLOCK_LENGTH}")
        end = HEADER_LENGTH + block_length
        if n < end:
            raise DecodeError(cls.__name__, f"truncated block: {n - HEADER_LENGTH} of {block_length} bytes")
        # A larger sender block_length: newer fixed fields we do not know are skipped.
        return cls._finish(buf, n, end, cls._BLOCK.unpack_from(buf, HEADER_LENGTH))

    @classmethod
    def _finish(cls, buf: bytes, n: int, offset: int, fixed: tuple[Any, ...]) -> Self:
        """Resolve enums, decode groups/vars from ``offset``, reject trailing bytes, build."""
        if cls._ENUMS:
            fixed = _resolve_enums(cls.__name__, "", cls._ENUMS, fixed)
        if not cls._TAILS:
            if n != offset:
                raise DecodeError(cls.__name__, f"{n - offset} trailing bytes after the block")
            return cls._make(*fixed)
        tails, offset = _decode_tails(cls.__name__, "", cls._TAILS, buf, offset, n)
        if offset != n:
            raise DecodeError(cls.__name__, f"{n - offset} trailing bytes after the last field")
        return cls._make(*fixed, *tails)


class GroupEntry(_Encodable):
    """Base of a repeating group's entry: a fixed block and its own variable fields, no header."""

    __slots__ = ()


def _encode_tails(tails: tuple[tuple[str, str, Any], ...], values: tuple[Any, ...], parts: list[bytes]) -> None:
    for (_name, kind, entry), value in zip(tails, values, strict=True):
        if kind is _DATA:
            parts.append(U32.pack(len(value)))
            parts.append(value)
        elif kind is _ASCII:
            raw = value.encode("ascii")
            parts.append(U32.pack(len(raw)))
            parts.append(raw)
        elif kind is _TAIL:
            parts.append(value)
        else:
            parts.append(GROUP_HEADER.pack(entry.BLOCK_LENGTH, len(value)))
            for item in value:
                item._encode_into(parts)


def _resolve_enums(
    what: str, path: str, enums: tuple[tuple[int, str, type[IntEnum], dict[int, IntEnum]], ...], values: tuple
) -> tuple:
    resolved = list(values)
    for index, name, enum_cls, table in enums:
        member = table.get(resolved[index])
        if member is None:
            raise DecodeError(what, f"{path}{name}={resolved[index]} is not a {enum_cls.__name__}")
        resolved[index] = member
    return tuple(resolved)


def _decode_tails(
    what: str, path: str, tails: tuple[tuple[str, str, Any], ...], buf: bytes, offset: int, n: int
) -> tuple[list[Any], int]:
    """Decode groups/vars from ``offset``; returns the values and the offset after them."""
    out: list[Any] = []
    for name, kind, entry in tails:
        if kind is _TAIL:
            out.append(buf[offset:])
            offset = n
            continue
        if kind is _GROUP:
            items, offset = _decode_group(what, f"{path}{name}", entry, buf, offset, n)
            out.append(items)
            continue
        if offset + 4 > n:
            raise DecodeError(what, f"truncated {path}{name} length at offset {offset}")
        (length,) = U32.unpack_from(buf, offset)
        offset += 4
        end = offset + length
        if end > n:
            left = n - offset
            raise DecodeError(what, f"{path}{name} length {length} runs past the end ({left} bytes left)")
        raw = buf[offset:end]
        offset = end
        if kind is _ASCII:
            if not raw.isascii():
                raise DecodeError(what, f"{path}{name} is not ASCII")
            out.append(raw.decode("ascii"))
        else:
            out.append(raw)
    return out, offset


def _decode_group(
    what: str, path: str, entry: type[GroupEntry], buf: bytes, offset: int, n: int
) -> tuple[tuple[GroupEntry, ...], int]:
    if offset + GROUP_HEADER.size > n:
        raise DecodeError(what, f"truncated {path} group header at offset {offset}")
    block_length, count = GROUP_HEADER.unpack_from(buf, offset)
    offset += GROUP_HEADER.size
    if block_length < entry.BLOCK_LENGTH:
        raise DecodeError(what, f"{path} group block_length {block_length} < {entry.BLOCK_LENGTH}")
    items = []
    for i in range(count):
        end = offset + block_length
        if end > n:
            left = n - offset
            raise DecodeError(what, f"truncated {path}[{i}]: block needs {block_length} bytes, {left} left")
        values = entry._BLOCK.unpack_from(buf, offset)
        item_path = f"{path}[{i}]."
        if entry._ENUMS:
            values = _resolve_enums(what, item_path, entry._ENUMS, values)
        tails, offset = _decode_tails(what, item_path, entry._TAILS, buf, end, n)
        items.append(entry._make(*values, *tails))
    return tuple(items), offset


def _explain_fixed(obj: _Encodable) -> None:
    """struct.pack rejected a fixed field: find which one and say why."""
    cls = type(obj)
    for name, fmt in cls._FIXED:
        value = getattr(obj, name)
        lo, hi, width = _RANGES[fmt]
        if not isinstance(value, int):
            raise TypeError(f"{cls.__name__}.{name}: expected int, got {type(value).__name__}")
        if not lo <= value <= hi:
            raise ValueError(f"{cls.__name__}.{name}={value} out of range for {width}")
    raise ValueError(f"{cls.__name__}: fixed fields cannot be encoded")  # pragma: no cover


def _tuple_getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return attrgetter(*names)


def _compile_make(cls: type) -> Callable[..., Any]:
    """An unvalidated constructor for decode, whose values are range-checked by construction;
    skipping the dataclass ``__init__``/``__post_init__`` roughly halves decode time."""
    names = [f.name for f in fields(cls)]
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    args = [f"a{i}" for i in range(len(names))]
    lines = [f"def _make({', '.join(args)}):", "    o = _new(_cls)"]
    for i, name in enumerate(names):
        namespace[f"_set{i}"] = cls.__dict__[name].__set__  # the slot's member descriptor
        lines.append(f"    _set{i}(o, a{i})")
    lines.append("    return o")
    exec("\n".join(lines), namespace)
    return namespace["_make"]


def _compile_message(cls: type[Message]) -> tuple[Callable[..., bytes], Callable[..., Any]]:
    """Straight-line ``encode`` and fast-path ``decode`` for one message class.

    Generated the way dataclasses generates ``__init__``: per-call loops over field tables cost
    more than the packing itself. Semantics are those of :meth:`Message.encode` and
    :meth:`Message.decode`; the fast path only accepts our own exact header (block_length,
    template id, schema) and defers everything else, including every error, to the checked path.
    """
    namespace = _message_namespace(cls)
    enc = _encode_source(cls)
    dec = _decode_source(cls, namespace)
    exec("\n".join(enc), namespace)
    exec("\n".join(dec), namespace)
    cls._SOURCE = "\n".join(enc) + "\n\n" + "\n".join(dec)  # for debugging: print(Cls._SOURCE)
    encode, decode = namespace["encode"], namespace["decode"]
    encode.__doc__ = "Header + fixed block + groups/vars."
    decode.__doc__ = "Decode one whole message; raises DecodeError on any malformed input."
    encode.__qualname__, decode.__qualname__ = f"{cls.__name__}.encode", f"{cls.__name__}.decode"
    return encode, decode


def _message_namespace(cls: type[Message]) -> dict[str, Any]:
    """The globals every generated ``encode``/``decode`` of ``cls`` starts from."""
    return {
        "_pack": cls._FULL.pack,
        "_unpack": cls._FULL.unpack_from,
        "_u32": U32.pack,
        "_group_header": GROUP_HEADER.pack,
        "_u32_at": U32.unpack_from,
        "_decode_group": _decode_group,
        "_new": object.__new__,
        "_cls": cls,
    }


def _encode_source(cls: type[Message]) -> list[str]:
    """The lines of the generated ``encode``: one pack of header and block, then the tails in order."""
    fixed = [name for name, _fmt in cls._FIXED]
    head = ", ".join([str(v) for v in cls._HEAD] + [f"self.{name}" for name in fixed])
    enc = ["def encode(self):"]
    if not cls._TAILS:
        enc.append(f"    return _pack({head})")
    elif cls._TAILS[0][1] is _TAIL:
        enc.append(f"    return _pack({head}) + self.{cls._TAILS[0][0]}")
    else:
        enc.append(f"    parts = [_pack({head})]")
        for name, kind, entry in cls._TAILS:
            if kind is _GROUP:
                enc += [
                    f"    items = self.{name}",
                    f"    parts.append(_group_header({entry.BLOCK_LENGTH}, len(items)))",
                    "    for item in items:",
                    "        item._encode_into(parts)",
                ]
                continue
            value = f"self.{name}.encode('ascii')" if kind is _ASCII else f"self.{name}"
            enc += [f"    v = {value}", "    parts.append(_u32(len(v)))", "    parts.append(v)"]
        enc.append("    return b''.join(parts)")
    return enc


def _decode_source(cls: type[Message], namespace: dict[str, Any]) -> list[str]:
    """The lines of the generated ``decode``; adds the enum tables, group entries and slot setters
    they use to ``namespace``."""
    size = cls._FULL.size
    names = [f"a{i}" for i in range(len(cls._FIXED))]
    dec = [
        "def decode(cls, buf):",
        "    if type(buf) is not bytes:",
        "        buf = bytes(buf)",
        "    n = len(buf)",
        f"    if n {'>=' if cls._TAILS else '=='} {size}:",
        f"        {', '.join(['block_length', 'template_id', 'schema_id', '_version', *names])} = _unpack(buf)",
        f"        if block_length == {cls.BLOCK_LENGTH} and template_id == {cls.TEMPLATE_ID} "
        f"and schema_id == {SCHEMA_ID}:",
    ]
    dec += _decode_enum_source(cls, namespace)
    tail_lines, tail_values = _decode_tails_source(cls, namespace)
    dec += tail_lines
    dec.append("            o = _new(_cls)")
    dec += _decode_build_source(cls, names + tail_values, namespace)
    dec += ["            return o", "    return cls._decode_checked(buf, n)"]
    return dec


def _decode_enum_source(cls: type[Message], namespace: dict[str, Any]) -> list[str]:
    """Decode lines turning each enum field's int into its member, deferring an unknown value."""
    lines: list[str] = []
    for index, _name, _enum_cls, table in cls._ENUMS:
        namespace[f"_table{index}"] = table
        lines += [
            f"            a{index} = _table{index}.get(a{index})",
            f"            if a{index} is None:",
            "                return cls._decode_checked(buf, n)",
        ]
    return lines


def _decode_tails_source(cls: type[Message], namespace: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Decode lines for the groups/vars after the block, and the names of the values they set."""
    lines: list[str] = []
    values: list[str] = []
    if cls._TAILS:
        lines.append(f"            offset = {cls._FULL.size}")
    for i, (name, kind, entry) in enumerate(cls._TAILS):
        values.append(f"t{i}")
        if kind is _TAIL:
            lines += [f"            t{i} = buf[offset:]", "            offset = n"]
        elif kind is _GROUP:
            namespace[f"_entry{i}"] = entry
            call = f"_decode_group('{cls.__name__}', '{name}', _entry{i}, buf, offset, n)"
            lines.append(f"            t{i}, offset = {call}")
        else:
            lines += _decode_var_source(i, kind)
    if cls._TAILS:
        lines += ["            if offset != n:", "                return cls._decode_checked(buf, n)"]
    return lines, values


def _decode_var_source(i: int, kind: str) -> list[str]:
    """Decode lines for variable field ``t{i}`` (u32 length + bytes, checked ASCII for ``_ASCII``)."""
    lines = [
        "            if offset + 4 > n:",
        "                return cls._decode_checked(buf, n)",
        "            end = offset + 4 + _u32_at(buf, offset)[0]",
        "            if end > n:",
        "                return cls._decode_checked(buf, n)",
        f"            t{i} = buf[offset + 4 : end]",
        "            offset = end",
    ]
    if kind is _ASCII:
        lines += [
            f"            if not t{i}.isascii():",
            "                return cls._decode_checked(buf, n)",
            f"            t{i} = t{i}.decode('ascii')",
        ]
    return lines


def _decode_build_source(cls: type[Message], values: list[str], namespace: dict[str, Any]) -> list[str]:
    """Decode lines storing each decoded value in its slot of the new instance ``o``."""
    lines: list[str] = []
    # codec() checked that cls is a dataclass; mypy cannot see it through type[Message].
    for i, (value, f) in enumerate(zip(values, fields(cast(Any, cls)), strict=True)):
        namespace[f"_set{i}"] = cls.__dict__[f.name].__set__
        lines.append(f"            _set{i}(o, {value})")
    return lines


def codec(cls: _T) -> _T:
    """Class decorator (apply *above* ``@dataclass(frozen=True, slots=True)``): read the field
    annotations and attach the precompiled structs, getters and decode tables."""
    if not (is_dataclass(cls) and issubclass(cls, _Encodable)):
        raise TypeError(f"@codec needs a dataclass deriving from Message or GroupEntry, got {cls!r}")
    if "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: use @dataclass(frozen=True, slots=True)")
    fixed, enums, tails, describe = _field_tables(cls)
    block_format = "".join(fmt for _name, fmt in fixed)
    block = struct.Struct("<" + block_format)
    declared = cls.__dict__.get("BLOCK_LENGTH")
    if declared != block.size:
        raise TypeError(f"{cls.__name__}: BLOCK_LENGTH {declared} but fields take {block.size} bytes")
    cls._BLOCK = block
    cls._FIXED = tuple(fixed)
    cls._ENUMS = tuple(enums)
    cls._TAILS = tuple(tails)
    cls._DESCRIBE = tuple(describe)
    cls._get_fixed = staticmethod(_tuple_getter([name for name, _fmt in fixed]))
    cls._get_tails = staticmethod(_tuple_getter([name for name, _kind, _entry in tails]))
    cls._make = staticmethod(_compile_make(cls))
    if issubclass(cls, Message):
        _attach_message_header(cls, block_format)
        encode, decode = _compile_message(cls)
        # A class that writes its own encode/decode (SessionMessageHeader) keeps them.
        if "encode" not in cls.__dict__:
            cls.encode = encode
        if "decode" not in cls.__dict__:
            cls.decode = classmethod(decode)
    return cls


def _field_tables(
    cls: type[_Encodable],
) -> tuple[
    list[tuple[str, str]],
    list[tuple[int, str, type[IntEnum], dict[int, IntEnum]]],
    list[tuple[str, str, Any]],
    list[tuple[str, str]],
]:
    """The fixed fields, enums, tails and describe entries read from ``cls``'s field annotations,
    checking that fixed fields come first, then groups, then var data (or one Payload tail)."""
    hints = get_type_hints(cls, include_extras=True)
    fixed: list[tuple[str, str]] = []
    enums: list[tuple[int, str, type[IntEnum], dict[int, IntEnum]]] = []
    tails: list[tuple[str, str, Any]] = []
    describe: list[tuple[str, str]] = []
    # codec() checked that cls is a dataclass; mypy cannot see it through type[_Encodable].
    for f in fields(cast(Any, cls)):
        hint = hints[f.name]
        if get_origin(hint) is not Annotated:
            raise TypeError(f"{cls.__name__}.{f.name}: annotate with a wire type (Int64, AsciiVar, ...)")
        base, marker = get_args(hint)[0], get_args(hint)[1]
        if isinstance(marker, Fixed):
            if tails:
                raise TypeError(f"{cls.__name__}.{f.name}: fixed fields must precede groups and var data")
            if isinstance(base, type) and issubclass(base, IntEnum):
                enums.append((len(fixed), f.name, base, {m.value: m for m in base}))
                describe.append((f.name, "enum"))
            else:
                describe.append((f.name, "version" if marker.is_version else "int"))
            fixed.append((f.name, marker.fmt))
        elif isinstance(marker, Group):
            if any(kind is not _GROUP for _n, kind, _e in tails):
                raise TypeError(f"{cls.__name__}.{f.name}: groups must precede var data")
            tails.append((f.name, _GROUP, marker.entry))
            describe.append((f.name, "group"))
        elif isinstance(marker, VarAscii | VarData):
            if any(kind is _TAIL for _n, kind, _e in tails):
                raise TypeError(f"{cls.__name__}.{f.name}: nothing may follow a Payload tail")
            tails.append((f.name, _ASCII if isinstance(marker, VarAscii) else _DATA, None))
            describe.append((f.name, "str" if isinstance(marker, VarAscii) else "bytes"))
        elif isinstance(marker, Tail):
            if tails or not issubclass(cls, Message):
                raise TypeError(f"{cls.__name__}.{f.name}: a Payload tail must be a message's only tail")
            tails.append((f.name, _TAIL, None))
            describe.append((f.name, "bytes"))
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: unknown wire marker {marker!r}")
    return fixed, enums, tails, describe


def _attach_message_header(cls: type[Message], block_format: str) -> None:
    """Check the message's ``TEMPLATE_ID`` and attach its header-and-block struct, header and key."""
    template_id = cls.__dict__.get("TEMPLATE_ID")
    if not isinstance(template_id, int) or not 0 <= template_id <= U16_MAX:
        raise TypeError(f"{cls.__name__}: TEMPLATE_ID must be a uint16, got {template_id!r}")
    block = cls._BLOCK
    cls._FULL = struct.Struct("<HHHH" + block_format)
    cls._HEAD = (block.size, template_id, SCHEMA_ID, SCHEMA_VERSION)
    cls._KEY = (block.size, template_id, SCHEMA_ID)
