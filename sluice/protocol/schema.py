"""The declarative schema engine: Kafka message declarations in, fast codecs out.

A message is declared once, the way Kafka's ``common/message/*.json`` files declare it::

    ApiVersions = api(18, "ApiVersions", versions="0-3", flexible="3+",
        request=[F("client_software_name", "string", "3+"), ...],
        response=[F("error_code", "int16"),
                  F("api_keys", "[]ApiVersion", fields=[F("api_key", "int16"), ...]), ...])

and everything else is derived from the declaration:

* a message class per struct (``ApiVersionsResponse``, ``ApiVersionsResponse.ApiVersion``) with
  ``__slots__``, keyword construction (a generated ``__init__`` with the defaults inlined, see
  ``_compile_init``), defaults for omitted fields, ``==`` and ``repr``;
* per (struct, version) a decoder and an encoder, generated as Python source once on first use
  and compiled with ``exec`` -- straight-line code, with runs of consecutive fixed-width fields
  packed/unpacked by one ``struct.Struct`` call. Produce and Fetch go through here on every
  request, so this is the hot path; the generated source of any codec can be read with
  :meth:`StructSchema.source` when debugging.

Semantics follow Kafka's generated ``*Data`` classes:

* a field exists in the versions of its ``versions`` range; in other versions it is neither
  written nor read and decodes to its default. Encoding a message at a version silently drops
  fields the version does not have (responses carry every field; each client gets its version).
* ``nullable`` is the range of versions in which the field may be null (``None``); writing
  ``None`` in another version raises ``ValueError``.
* in flexible versions strings, bytes, records and arrays use the compact encodings and every
  struct ends with a tagged-field section. A field with ``tag`` is written there (only when it
  differs from its default) instead of in line. Unknown tags are skipped on decode.
* defaults: 0 / False / "" / empty list / zero UUID / struct of defaults, or ``default=``;
  ``default=None`` for a nullable field means null.

Decoders raise :class:`~sluice.protocol.errors.ProtocolError` naming the message, the field path and
the byte position for any malformed input. Encoders raise ``ValueError`` for values that do not
fit their declared type (a bug in the caller, not bad input from the network).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

from . import types as t
from .errors import ProtocolError
from .varint import Buffer

__all__ = [
    "Api",
    "F",
    "Field",
    "Message",
    "MessageSchema",
    "RequestMessage",
    "ResponseMessage",
    "StructSchema",
    "api",
]

_UNSET: Any = object()
_PRIMITIVES = {
    "bool", "int8", "int16", "int32", "int64", "uint16", "float64", "uuid", "string", "bytes",
    "records",
}  # fmt: skip


def _contains(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


@dataclass(frozen=True, eq=False)
class Field:
    """One declared field. Build it with :func:`F`; attributes mirror Kafka's JSON keys."""

    name: str
    type: str
    versions: tuple[int, int] | None
    nullable: tuple[int, int] | None
    default: Any
    tag: int | None
    tagged: tuple[int, int] | None
    flexible: bool
    struct: StructSchema[Any] | None
    is_array: bool = field(init=False)
    item_type: str = field(init=False)

    def __post_init__(self) -> None:
        is_array = self.type.startswith("[]")
        object.__setattr__(self, "is_array", is_array)
        object.__setattr__(self, "item_type", self.type[2:] if is_array else self.type)

    def present(self, version: int) -> bool:
        return _contains(self.versions, version)

    def is_nullable(self, version: int) -> bool:
        return _contains(self.nullable, version)

    def is_tagged(self, version: int, flexible: bool) -> bool:
        return flexible and self.tag is not None and _contains(self.tagged, version)

    def default_value(self) -> Any:
        """A fresh default value (lists and structs are new objects every call)."""
        if self.default is not _UNSET:
            return self.default
        if self.is_array:
            return []
        if self.struct is not None:
            return self.struct.cls()
        return _TYPE_DEFAULTS[self.type]


_TYPE_DEFAULTS: dict[str, Any] = {
    "bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0,
    "uuid": t.ZERO_UUID, "string": "", "bytes": b"", "records": None,
}  # fmt: skip


def F(
    name: str,
    type: str,
    versions: str = "0+",
    *,
    nullable: str | None = None,
    default: Any = _UNSET,
    tag: int | None = None,
    tagged: str | None = None,
    flexible: bool = True,
    fields: Sequence[Field] | None = None,
) -> Field:
    """Declare a field: ``F(name, type, versions, nullable=, default=, tag=, tagged=, fields=)``.

    ``type`` is a Kafka type name (``int32``, ``string``, ``[]int32``, ``records``...) or a struct
    name (``"[]TopicData"`` or ``"LeaderIdAndEpoch"``) whose ``fields`` are given. ``versions``,
    ``nullable`` and ``tagged`` are Kafka version ranges (``"3+"``, ``"0-7"``); ``tagged``
    defaults to ``versions`` when ``tag`` is set. ``flexible=False`` keeps the classic encoding in
    flexible versions (only the request header's client_id does that).
    """
    item = type[2:] if type.startswith("[]") else type
    struct_schema: StructSchema[Any] | None = None
    if fields is not None:
        if item in _PRIMITIVES:
            raise ValueError(f"{name}: primitive type {type} cannot have fields")
        struct_schema = StructSchema(item, list(fields))
    elif item not in _PRIMITIVES:
        raise ValueError(f"{name}: unknown type {type} (structs need fields=)")
    vrange = t.parse_versions(versions)
    if tag is not None and item == "records":
        raise ValueError(f"{name}: records cannot be a tagged field")
    if struct_schema is not None and not type.startswith("[]") and nullable and tag is not None:
        raise ValueError(f"{name}: nullable tagged struct fields are not supported")
    if default is None and nullable is None:
        raise ValueError(f"{name}: default null needs nullable=")
    return Field(
        name=name,
        type=type,
        versions=vrange,
        nullable=t.parse_versions(nullable) if nullable else None,
        default=default,
        tag=tag,
        tagged=(t.parse_versions(tagged) if tagged else vrange) if tag is not None else None,
        flexible=flexible,
        struct=struct_schema,
    )


class _MessageMeta(type):
    """No behaviour. Declared so that mypy hashes a message *class* with the metaclass's
    ``__hash__``: without one it checks ``type[Message]`` against ``Message.__hash__ = None``
    and rejects message classes as ``lru_cache`` keys (the handlers cache per class)."""


class Message(metaclass=_MessageMeta):
    """Base of every generated message and struct class.

    Construct with keyword arguments (or positional ones in declaration order); omitted fields
    take their declared defaults. Instances are plain mutable objects (``__slots__``); equality
    compares all fields.

    The classes are built at run time, so the type checker learns their fields from the stub
    ``messages.pyi`` generated from the same declarations (:mod:`sluice.protocol.codegen`).
    This base deliberately has no ``__getattr__`` for the checker: a misspelt field of a
    generated class is an error, and code holding a bare ``Message`` must say which one it has.
    """

    __slots__ = ()
    _schema: ClassVar[StructSchema[Any]]
    _slots: ClassVar[tuple[str, ...]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Generic construction. Every class built by StructSchema replaces this with a compiled
        # keyword-only __init__ (see _compile_init) and falls back here only for positional
        # arguments or unknown names, so the error messages below stay the only ones.
        if args:
            if len(args) > len(self._slots):
                raise TypeError(f"{type(self).__name__} takes at most {len(self._slots)} fields")
            for name, value in zip(self._slots, args, strict=False):
                if name in kwargs:
                    raise TypeError(f"{type(self).__name__}: {name} given twice")
                kwargs[name] = value
        for f in self._schema.fields:
            if f.name in kwargs:
                setattr(self, f.name, kwargs.pop(f.name))
            else:
                setattr(self, f.name, f.default_value())
        if kwargs:
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(sorted(kwargs))}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._slots)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._slots)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """Fields as a dict, nested structs converted too (for logs and tests)."""

        def conv(v: Any) -> Any:
            if isinstance(v, Message):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, memoryview):
                return bytes(v)
            return v

        return {n: conv(getattr(self, n)) for n in self._slots}


M = TypeVar("M", bound=Message)
ResponseT = TypeVar("ResponseT", bound="ResponseMessage")
RequestT = TypeVar("RequestT", bound="RequestMessage[Any]")


class RequestMessage(Message, Generic[ResponseT]):
    """Base of the top-level request classes; ``ResponseT`` names the class of the answer, so
    that a client's ``request(FetchRequest(...))`` is checked as returning a ``FetchResponse``
    (the stub declares ``class FetchRequest(RequestMessage[FetchResponse])``)."""

    __slots__ = ()


class ResponseMessage(Message):
    """Base of the top-level response classes."""

    __slots__ = ()


Decoder = Callable[[Buffer, int], tuple[Any, int]]
Encoder = Callable[[Any, bytearray, list[Any]], None]


class StructSchema(Generic[M]):
    """A struct (or a whole message): ordered fields, a generated class, compiled codecs.

    ``M`` is the class the checker knows for it (from the generated stub); the class itself is
    built here, a subclass of ``base`` with one slot per field.
    """

    def __init__(self, name: str, fields: list[Field], base: type[Message] = Message) -> None:
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise ValueError(f"{name}: duplicate field names")
        tags = [f.tag for f in fields if f.tag is not None]
        if len(set(tags)) != len(tags):
            raise ValueError(f"{name}: duplicate tags")
        self.name = name
        self.fields = fields
        namespace = {"__slots__": tuple(names), "_slots": tuple(names), "_schema": self}
        self.cls = cast(type[M], type(name, (base,), namespace))
        self.cls.__init__ = self._first_init()  # type: ignore[method-assign]
        self._init_source = ""
        # Nested struct classes are reachable as attributes: ProduceRequest.TopicProduceData.
        for f in fields:
            if f.struct is not None:
                setattr(self.cls, f.struct.name, f.struct.cls)
        self._decoders: dict[tuple[int, bool], Decoder] = {}
        self._encoders: dict[tuple[int, bool], Encoder] = {}
        self._sources: dict[tuple[str, int, bool], str] = {}

    def _first_init(self) -> Callable[..., None]:
        """The class's ``__init__`` until it is first called: it compiles the specialised one
        (:func:`_compile_init`), installs it on the class and runs it. Compiling them all when
        the messages are declared took ~30 ms of every process's start for the ~130 structs,
        most of which a process never builds."""

        def first_init(obj: Any, *args: Any, **kwargs: Any) -> None:
            self.compiled_init()(obj, *args, **kwargs)

        return first_init

    def compiled_init(self) -> Callable[..., None]:
        """The specialised ``__init__`` of the class, compiled and installed on first use."""
        if not self._init_source:
            init, self._init_source = _compile_init(self)
            self.cls.__init__ = init  # type: ignore[method-assign]
        return cast("Callable[..., None]", self.cls.__init__)

    def walk(self) -> Iterator[StructSchema[Any]]:
        """This struct and every nested struct, depth first."""
        yield self
        for f in self.fields:
            if f.struct is not None:
                yield from f.struct.walk()

    def set_owner(self, owner: type[Message]) -> None:
        """Expose every nested struct class on the top-level message class too."""
        for s in self.walk():
            if s is not self:
                setattr(owner, s.name, s.cls)

    # -- compiled codecs ---------------------------------------------------------------------

    def decoder(self, version: int, flexible: bool) -> Decoder:
        key = (version, flexible)
        dec = self._decoders.get(key)
        if dec is None:
            dec = self._decoders[key] = _compile_decoder(self, version, flexible)
        return dec

    def encoder(self, version: int, flexible: bool) -> Encoder:
        key = (version, flexible)
        enc = self._encoders.get(key)
        if enc is None:
            enc = self._encoders[key] = _compile_encoder(self, version, flexible)
        return enc

    def source(self, kind: str, version: int, flexible: bool) -> str:
        """The generated Python source of the ``"decode"`` or ``"encode"`` function."""
        (self.decoder if kind == "decode" else self.encoder)(version, flexible)
        return self._sources[(kind, version, flexible)]


# ------------------------------------------------------------------------------------------------
# Code generation. Each compiled function gets a namespace of helpers (readers, writers, struct
# objects, nested codecs, default constants) referenced by short generated names.
# ------------------------------------------------------------------------------------------------


class _Gen:
    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "ProtocolError": ProtocolError,
            "struct_error": struct.error,
            "t": t,
        }
        self.lines: list[str] = []
        self._n = 0

    def const(self, value: Any, hint: str = "c") -> str:
        self._n += 1
        name = f"_{hint}{self._n}"
        self.ns[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def compile(self, fn_name: str) -> tuple[Callable[..., Any], str]:
        src = "\n".join(self.lines) + "\n"
        exec(compile(src, f"<sluice codec {fn_name}>", "exec"), self.ns)
        return self.ns[fn_name], src


def _compile_init(s: StructSchema[Any]) -> tuple[Callable[..., None], str]:
    """A specialised ``__init__`` for the class of ``s``: keyword-only parameters, one per field,
    and straight-line attribute stores with each field's default inlined.

    Produce and Fetch build several messages per partition per request; the generic
    ``Message.__init__`` loop (a dict pop and a ``setattr`` per field) cost ~3.5 us per object.
    A parameter left at the private sentinel takes the field's default (a fresh list / struct
    every time, the very ``default=`` object otherwise, as ``Field.default_value``). Positional
    arguments or unknown names go to the generic ``Message.__init__`` so they raise exactly its
    errors; the sentinel lets it tell which keywords were really given.
    """
    g = _Gen()
    un = g.const(_UNSET, "UN")
    gen = g.const(Message.__init__, "G")
    names = [f.name for f in s.fields]
    assert not {"self", "_args", "_kw"} & set(names), s.name
    params = "".join(f"{n}={un}, " for n in names)
    g.emit(0, f"def __init__(self, *_args, {params}**_kw):")
    g.emit(1, "if _args or _kw:")
    for n in names:  # only the keywords really given, so the generic code can spot duplicates
        g.emit(2, f"if {n} is not {un}:")
        g.emit(3, f"_kw[{n!r}] = {n}")
    g.emit(2, f"{gen}(self, *_args, **_kw)")
    g.emit(2, "return")
    for f in s.fields:
        g.emit(1, f"self.{f.name} = {_default_expr(g, f)} if {f.name} is {un} else {f.name}")
    fn, src = g.compile("__init__")
    return fn, src


def _scalar_reader(f: Field, version: int, compact: bool) -> Callable[..., Any] | None:
    """Reader for a variable-length scalar type, or None for fixed-width types."""
    nullable = f.is_nullable(version)
    typ = f.item_type
    if typ == "string":
        if compact:
            return t.read_compact_nullable_string if nullable else t.read_compact_string
        return t.read_nullable_string if nullable else t.read_string
    if typ == "bytes":
        if compact:
            return t.read_compact_nullable_bytes if nullable else t.read_compact_bytes
        return t.read_nullable_bytes if nullable else t.read_bytes
    if typ == "records":
        return t.read_compact_records if compact else t.read_records
    if typ == "uuid":
        return t.read_uuid
    return None


def _item_reader(f: Field, version: int, flexible: bool) -> Decoder:
    """A reader for one array item (or one tagged value) of field ``f``."""
    if f.struct is not None:
        return f.struct.decoder(version, flexible)
    compact = flexible and f.flexible
    if f.item_type in t.FIXED_FORMATS:
        st = struct.Struct(">" + t.FIXED_FORMATS[f.item_type])
        what = f.item_type

        def read_one(buf: Buffer, pos: int) -> tuple[Any, int]:
            return t.read_fixed(st, what, buf, pos)

        return read_one
    # Array items are never null in Kafka's schemas ([]string items are plain strings).
    item = Field(f.name, f.item_type, f.versions, None, _UNSET, None, None, f.flexible, None)
    reader = _scalar_reader(item, version, compact)
    assert reader is not None
    return reader


def _compile_decoder(s: StructSchema[Any], version: int, flexible: bool) -> Decoder:
    g = _Gen()
    cls = g.const(s.cls, "C")
    regular = [f for f in s.fields if f.present(version) and not f.is_tagged(version, flexible)]
    tagged = [f for f in s.fields if f.is_tagged(version, flexible)]
    absent = [f for f in s.fields if f not in regular and f not in tagged]
    g.emit(0, "def decode(buf, pos):")
    g.emit(1, f"o = {cls}.__new__({cls})")
    for f in absent:
        g.emit(1, f"o.{f.name} = {_default_expr(g, f)}")
    g.emit(1, "f = None")
    g.emit(1, "try:")

    for run, st in _field_runs(regular):
        if st is not None:  # consecutive fixed-width fields: one unpack_from call
            sn = g.const(st.unpack_from, "U")
            g.emit(2, f"f = {run[0].name!r}")
            targets = ", ".join(f"o.{x.name}" for x in run)
            g.emit(2, f"{targets}, = {sn}(buf, pos)")
            g.emit(2, f"pos += {st.size}")
            continue
        g.emit(2, f"f = {run[0].name!r}")
        _emit_read_field(g, run[0], version, flexible, 2)

    if flexible:
        g.emit(2, "f = '(tagged fields)'")
        known = {f.tag: _item_reader_or_array(f, version, flexible) for f in tagged}
        kn = g.const(known, "K")
        g.emit(2, f"tf, pos = t.read_tagged_fields(buf, pos, {kn})")
        for f in tagged:
            g.emit(2, f"o.{f.name} = tf[{f.tag}] if {f.tag} in tf else {_default_expr(g, f)}")
    g.emit(2, "pass")
    g.emit(1, "except struct_error:")
    g.emit(2, f"raise ProtocolError(f'{s.name}.{{f}}: truncated at byte {{pos}}') from None")
    g.emit(1, "except ProtocolError as exc:")
    g.emit(2, f"raise ProtocolError(f'{s.name}.{{f}}: {{exc}}') from None")
    g.emit(1, "return o, pos")
    fn, src = g.compile("decode")
    s._sources[("decode", version, flexible)] = src
    return fn


def _field_runs(fields: list[Field]) -> Iterator[tuple[list[Field], struct.Struct | None]]:
    """Split fields, in order, into runs of consecutive fixed-width scalars (with the one
    ``struct.Struct`` that reads or writes the whole run) and single other fields (``None``)."""
    i = 0
    while i < len(fields):
        run = [fields[i]]
        if not run[0].is_array and run[0].item_type in t.FIXED_FORMATS:
            while (
                i + len(run) < len(fields)
                and not fields[i + len(run)].is_array
                and fields[i + len(run)].item_type in t.FIXED_FORMATS
            ):
                run.append(fields[i + len(run)])
            yield run, struct.Struct(">" + "".join(t.FIXED_FORMATS[x.item_type] for x in run))
        else:
            yield run, None
        i += len(run)


def _item_reader_or_array(f: Field, version: int, flexible: bool) -> Decoder:
    """Reader for a whole (tagged) field value, array or not."""
    if not f.is_array:
        if f.item_type in t.FIXED_FORMATS or f.struct is not None:
            return _item_reader(f, version, flexible)
        reader = _scalar_reader(f, version, flexible and f.flexible)
        assert reader is not None
        return reader
    item = _item_reader(f, version, flexible)
    compact = flexible and f.flexible
    nullable = f.is_nullable(version)
    len_reader = t.read_compact_array_len if compact else t.read_array_len

    def read_array(buf: Buffer, pos: int) -> tuple[list[Any] | None, int]:
        n, pos = len_reader(buf, pos, nullable)
        if n < 0:
            return None, pos
        out = []
        for _ in range(n):
            x, pos = item(buf, pos)
            out.append(x)
        return out, pos

    return read_array


def _emit_read_field(g: _Gen, f: Field, version: int, flexible: bool, ind: int) -> None:
    compact = flexible and f.flexible
    nullable = f.is_nullable(version)
    if not f.is_array:
        reader = _scalar_reader(f, version, compact)
        if reader is None:  # lone fixed field is handled by runs; struct field:
            assert f.struct is not None
            rn = g.const(f.struct.decoder(version, flexible), "D")
            if nullable:  # Kafka's null byte before a nullable struct: -1 null, 1 present
                g.emit(ind, "if t.INT8.unpack_from(buf, pos)[0] < 0:")
                g.emit(ind + 1, f"o.{f.name} = None")
                g.emit(ind + 1, "pos += 1")
                g.emit(ind, "else:")
                g.emit(ind + 1, f"o.{f.name}, pos = {rn}(buf, pos + 1)")
                return
        else:
            rn = g.const(reader, "R")
        g.emit(ind, f"o.{f.name}, pos = {rn}(buf, pos)")
        return
    ln = g.const(t.read_compact_array_len if compact else t.read_array_len, "L")
    g.emit(ind, f"n, pos = {ln}(buf, pos, {nullable})")
    g.emit(ind, "if n < 0:")
    g.emit(ind + 1, f"o.{f.name} = None")
    g.emit(ind, "else:")
    if f.struct is None and f.item_type in t.FIXED_FORMATS:
        ch = t.FIXED_FORMATS[f.item_type]
        width = struct.calcsize(">" + ch)
        g.emit(ind + 1, f"o.{f.name}, pos = t.read_fixed_array({ch!r}, {width}, buf, pos, n)")
        return
    rn = g.const(_item_reader(f, version, flexible), "I")
    g.emit(ind + 1, "lst = []")
    g.emit(ind + 1, "for _ in range(n):")
    g.emit(ind + 2, f"x, pos = {rn}(buf, pos)")
    g.emit(ind + 2, "lst.append(x)")
    g.emit(ind + 1, f"o.{f.name} = lst")


def _default_expr(g: _Gen, f: Field) -> str:
    """Source for a fresh default value of ``f``."""
    if f.default is not _UNSET:
        return g.const(f.default, "V") if not isinstance(f.default, int | str | bool | None) \
            else repr(f.default)  # fmt: skip
    if f.is_array:
        return "[]"
    if f.struct is not None:
        return f"{g.const(f.struct.cls, 'C')}()"
    d = _TYPE_DEFAULTS[f.type]
    return g.const(d, "V") if isinstance(d, uuid.UUID) else repr(d)


def _compile_encoder(s: StructSchema[Any], version: int, flexible: bool) -> Encoder:
    g = _Gen()
    g.emit(0, "def encode(o, out, parts):")
    g.emit(1, "f = None")
    g.emit(1, "try:")
    regular = [f for f in s.fields if f.present(version) and not f.is_tagged(version, flexible)]
    tagged = sorted(
        (f for f in s.fields if f.is_tagged(version, flexible)),
        key=lambda f: f.tag if f.tag is not None else 0,
    )
    for run, st in _field_runs(regular):
        if st is not None:  # consecutive fixed-width fields: one pack call
            pn = g.const(st.pack, "P")
            g.emit(2, f"f = {run[0].name!r}")
            g.emit(2, f"out += {pn}({', '.join(f'o.{x.name}' for x in run)})")
            continue
        g.emit(2, f"f = {run[0].name!r}")
        g.emit(2, f"v = o.{run[0].name}")
        _emit_write_value(g, run[0], version, flexible, 2, "out")
    if flexible:
        g.emit(2, "f = '(tagged fields)'")
        if not tagged:
            g.emit(2, "out += b'\\x00'")
        else:
            g.emit(2, "tf = []")
            for f in tagged:
                g.emit(2, f"f = {f.name!r}")
                g.emit(2, f"v = o.{f.name}")
                g.emit(2, f"if {_non_default_cond(g, f)}:")
                g.emit(3, "b = bytearray()")
                _emit_write_value(g, f, version, flexible, 3, "b")
                g.emit(3, f"tf.append(({f.tag}, b))")
            g.emit(2, "t.write_tagged_fields(out, tf)")
    g.emit(2, "pass")  # the struct may have no field in this version (ApiVersions v0-2)
    g.emit(1, "except (struct_error, TypeError, AttributeError, OverflowError) as exc:")
    g.emit(2, f"raise ValueError(f'{s.name}.{{f}}: {{exc}}') from None")
    fn, src = g.compile("encode")
    s._sources[("encode", version, flexible)] = src
    return fn


def _non_default_cond(g: _Gen, f: Field) -> str:
    if f.default is not _UNSET:
        return f"v != {g.const(f.default, 'V')}"
    if f.is_array:
        return "v"  # default is the empty list
    if f.struct is not None:
        # One default instance per codec, private to it (never handed out, never mutated),
        # instead of a fresh one per encode.
        return f"v != {g.const(f.struct.cls(), 'V')}"
    return f"v != {g.const(_TYPE_DEFAULTS[f.type], 'V')}"


def _writer_name(g: _Gen, f: Field, item_type: str, version: int, flexible: bool,
                 nullable: bool) -> str:  # fmt: skip
    compact = flexible and f.flexible
    w: Callable[..., None]
    if item_type == "string":
        if compact:
            w = t.write_compact_nullable_string if nullable else t.write_compact_string
        else:
            w = t.write_nullable_string if nullable else t.write_string
    elif item_type == "bytes":
        if compact:
            w = t.write_compact_nullable_bytes if nullable else t.write_compact_bytes
        else:
            w = t.write_nullable_bytes if nullable else t.write_bytes
    elif item_type == "uuid":
        w = t.write_uuid
    else:
        raise AssertionError(item_type)
    return g.const(w, "W")


def _emit_write_value(g: _Gen, f: Field, version: int, flexible: bool, ind: int,
                      out: str) -> None:  # fmt: skip
    """Emit code writing the value in local ``v`` of field ``f`` to bytearray ``out``."""
    compact = flexible and f.flexible
    nullable = f.is_nullable(version)
    if not f.is_array:
        typ = f.item_type
        if f.struct is not None:
            en = g.const(f.struct.encoder(version, flexible), "E")
            if nullable:  # Kafka's null byte before a nullable struct: -1 null, 1 present
                g.emit(ind, "if v is None:")
                g.emit(ind + 1, f"{out} += b'\\xff'")
                g.emit(ind, "else:")
                g.emit(ind + 1, f"{out} += b'\\x01'")
                g.emit(ind + 1, f"{en}(v, {out}, parts)")
            else:
                g.emit(ind, f"{en}(v, {out}, parts)")
        elif typ in t.FIXED_FORMATS:
            pn = g.const(struct.Struct(">" + t.FIXED_FORMATS[typ]).pack, "P")
            g.emit(ind, f"{out} += {pn}(v)")
        elif typ == "records":
            # Zero-copy hot path: see types.write_records (FetchSlice-like values become parts).
            wn = g.const(t.write_compact_records if compact else t.write_records, "W")
            g.emit(ind, f"{wn}({out}, parts, v)")
        else:
            if not nullable:
                g.emit(ind, "if v is None:")
                g.emit(ind + 1, f"raise TypeError('{f.name} is not nullable in v{version}')")
            g.emit(ind, f"{_writer_name(g, f, typ, version, flexible, nullable)}({out}, v)")
        return
    g.emit(ind, "if v is None:")
    if nullable:
        g.emit(ind + 1, f"{out} += {'bytes(1)' if compact else 't.NULL_INT32'}")
    else:
        g.emit(ind + 1, f"raise TypeError('{f.name} is not nullable in v{version}')")
    g.emit(ind, "else:")
    ln = g.const(t.write_compact_array_len if compact else t.write_array_len, "L")
    g.emit(ind + 1, f"{ln}({out}, len(v))")
    if f.struct is not None:
        en = g.const(f.struct.encoder(version, flexible), "E")
        g.emit(ind + 1, "for x in v:")
        g.emit(ind + 2, f"{en}(x, {out}, parts)")
    elif f.item_type in t.FIXED_FORMATS:
        ch = t.FIXED_FORMATS[f.item_type]
        g.emit(ind + 1, f"{out} += t.struct.pack(f'>{{len(v)}}{ch}', *v)")
    else:
        wn = _writer_name(g, f, f.item_type, version, flexible, False)
        g.emit(ind + 1, "for x in v:")
        g.emit(ind + 2, f"{wn}({out}, x)")


# ------------------------------------------------------------------------------------------------
# APIs
# ------------------------------------------------------------------------------------------------


class MessageSchema(Generic[M]):
    """The request or response of one API: a top-level struct plus version rules."""

    def __init__(self, api: Api[Any, Any], kind: str, fields: list[Field]) -> None:
        self.api = api
        self.kind = kind
        base = RequestMessage if kind == "Request" else ResponseMessage
        self.struct: StructSchema[M] = StructSchema(f"{api.name}{kind}", fields, base)
        self.cls: type[M] = self.struct.cls
        self.struct.set_owner(self.cls)

    def check_version(self, version: int) -> None:
        if not self.api.min_version <= version <= self.api.max_version:
            raise ValueError(f"{self.struct.name} has no version {version}")

    def decode(self, buf: Buffer, version: int, pos: int = 0) -> tuple[M, int]:
        """Decode one message starting at ``pos``; returns ``(message, end position)``."""
        self.check_version(version)
        dec = self.struct.decoder(version, self.api.is_flexible(version))
        obj, end = dec(buf, pos)
        return obj, end

    def encode_into(self, msg: M, version: int, out: bytearray, parts: list[Any]) -> None:
        """Append ``msg`` to ``out``; records that are not bytes go to ``parts`` (see types)."""
        self.check_version(version)
        if not isinstance(msg, self.cls):
            raise TypeError(f"expected {self.cls.__name__}, got {type(msg).__name__}")
        self.struct.encoder(version, self.api.is_flexible(version))(msg, out, parts)

    def encode(self, msg: M, version: int) -> bytes:
        """Encode ``msg`` to bytes (every ``records`` value must be bytes-like)."""
        out = bytearray()
        parts: list[Any] = []
        self.encode_into(msg, version, out, parts)
        if parts:
            raise ValueError("records objects need encode_into (use framing.encode_response)")
        return bytes(out)


class Api(Generic[RequestT, ResponseT]):
    """One Kafka API: key, name, implemented version range, flexible versions, both messages.

    The type parameters are the request and response classes (``Api[FetchRequest,
    FetchResponse]`` in the stub), so ``Fetch.response.cls`` is known to be ``FetchResponse``.
    """

    def __init__(
        self,
        key: int,
        name: str,
        versions: str,
        flexible: str,
        request: list[Field],
        response: list[Field],
    ) -> None:
        rng = t.parse_versions(versions)
        assert rng is not None
        self.key = key
        self.name = name
        self.min_version, self.max_version = rng
        self.flexible = t.parse_versions(flexible)
        self.request: MessageSchema[RequestT] = MessageSchema(self, "Request", request)
        self.response: MessageSchema[ResponseT] = MessageSchema(self, "Response", response)

    def is_flexible(self, version: int) -> bool:
        """Flexible versions use compact encodings, tagged fields and header v2 / v1."""
        return _contains(self.flexible, version)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def __repr__(self) -> str:
        return f"Api({self.key}, {self.name}, {self.min_version}-{self.max_version})"


def api(
    key: int,
    name: str,
    *,
    versions: str,
    flexible: str,
    request: list[Field],
    response: list[Field],
) -> Api[Any, Any]:
    """Declare an API; see the module docstring. (The stub gives each API its classes.)"""
    return Api(key, name, versions, flexible, request, response)
