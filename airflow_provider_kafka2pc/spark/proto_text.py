"""A proto3 ``.proto`` file's text as a ``FileDescriptorProto``, without ``protoc``.

Why here: the registry's Protobuf values are encoded from a descriptor, and the schema
registered is that descriptor (base64, as confluent-kafka's ``ProtobufSerializer`` registers
it); a user's schema comes as ``.proto`` text. ``protoc`` (``grpcio-tools``) would be a
native dependency for one parse per export, so this reads the proto3 subset a record schema
uses: ``syntax``, ``package``, ``import "google/protobuf/timestamp.proto"``, messages
(nested), enums, fields with ``optional``/``repeated``, ``map<K, V>``, ``oneof``; options and
``reserved`` are read and dropped. Anything else is refused by name. Type names are left as
written: the descriptor pool resolves them as ``protoc`` does (:mod:`.protobuf`).
"""

from __future__ import annotations

import re

from google.protobuf import descriptor_pb2

from ..errors import ConfigurationError

FD = descriptor_pb2.FieldDescriptorProto
#: The one import a schema may name: Google's Timestamp (protobuf-java has it built in).
TIMESTAMP_IMPORT = "google/protobuf/timestamp.proto"
SCALARS = {
    "double": FD.TYPE_DOUBLE,
    "float": FD.TYPE_FLOAT,
    "int64": FD.TYPE_INT64,
    "uint64": FD.TYPE_UINT64,
    "int32": FD.TYPE_INT32,
    "fixed64": FD.TYPE_FIXED64,
    "fixed32": FD.TYPE_FIXED32,
    "bool": FD.TYPE_BOOL,
    "string": FD.TYPE_STRING,
    "bytes": FD.TYPE_BYTES,
    "uint32": FD.TYPE_UINT32,
    "sfixed32": FD.TYPE_SFIXED32,
    "sfixed64": FD.TYPE_SFIXED64,
    "sint32": FD.TYPE_SINT32,
    "sint64": FD.TYPE_SINT64,
}
_TOKEN = re.compile(
    r"""\s+|//[^\n]*|/\*.*?\*/|(?P<t>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[A-Za-z_][\w.]*|\.[A-Za-z_][\w.]*|-?\d[\w.+-]*|[{}()\[\]<>;=,:.-])""",
    re.S,
)


def tokens(text: str) -> list[str]:
    """The tokens of ``text``, comments and blanks dropped."""
    found, at = [], 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise _refused(f"unexpected character {text[at]!r} at offset {at}")
        if match.group("t"):
            found.append(match.group("t"))
        at = match.end()
    return found


def _refused(problem: str) -> ConfigurationError:
    return ConfigurationError(f"the Protobuf schema does not parse: {problem}; nothing was written")


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokens(text)
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise _refused(f"expected {expected or 'more'}, found {token or 'the end'}")
        self.at += 1
        return token

    def skip_statement(self) -> None:
        """Up to the ``;`` ending this statement (an option, ``reserved``)."""
        depth = 0
        while True:
            token = self.take()
            depth += token in ("{", "[", "(")
            depth -= token in ("}", "]", ")")
            if token == ";" and depth == 0:
                return

    def skip_options(self) -> None:
        if self.peek() == "[":
            while self.take() != "]":
                pass

    def number(self) -> int:
        token = self.take()
        try:
            return int(token, 0)
        except ValueError:
            raise _refused(f"{token!r} is not a field number") from None

    # -- the file ----------------------------------------------------------------------------

    def file(self, name: str) -> descriptor_pb2.FileDescriptorProto:
        proto = descriptor_pb2.FileDescriptorProto(name=name)
        while self.peek() is not None:
            word = self.take()
            if word == "syntax":
                self.take("=")
                syntax = self.take().strip("\"'")
                if syntax != "proto3":
                    raise _refused(f'syntax "{syntax}": proto3 only')
                proto.syntax = syntax
                self.take(";")
            elif word == "package":
                proto.package = self.take()
                self.take(";")
            elif word == "import":
                path = self.take().strip("\"'")
                if path != TIMESTAMP_IMPORT:
                    raise _refused(f'import "{path}": only "{TIMESTAMP_IMPORT}" is supported')
                proto.dependency.append(path)
                self.take(";")
            elif word == "option":
                self.skip_statement()
            elif word == "message":
                self.message(proto.message_type.add())
            elif word == "enum":
                self.enum(proto.enum_type.add())
            elif word != ";":
                raise _refused(f"{word!r} is not supported at the top of the file")
        if proto.syntax != "proto3":
            raise _refused('no syntax = "proto3" statement')
        if not proto.message_type:
            raise _refused("no message")
        return proto

    def message(self, message: descriptor_pb2.DescriptorProto) -> None:
        message.name = self.take()
        self.take("{")
        while (word := self.peek()) != "}":
            if word in ("option", "reserved"):
                self.skip_statement()
            elif word == "message":
                self.take()
                self.message(message.nested_type.add())
            elif word == "enum":
                self.take()
                self.enum(message.enum_type.add())
            elif word == "oneof":
                self.take()
                self.oneof(message)
            elif word == ";":
                self.take()
            elif word in ("extensions", "extend", "group", "required"):
                raise _refused(f"{word!r} (in message {message.name}) is not proto3 here")
            else:
                self.field(message, None)
        self.take("}")
        _synthetic_oneofs(message)

    def oneof(self, message: descriptor_pb2.DescriptorProto) -> None:
        index = len(message.oneof_decl)
        message.oneof_decl.add(name=self.take())
        self.take("{")
        while (word := self.peek()) != "}":
            if word == "option":
                self.skip_statement()
            else:
                self.field(message, index)
        self.take("}")

    def field(self, message: descriptor_pb2.DescriptorProto, oneof: int | None) -> None:
        field = message.field.add()
        label = self.peek()
        if label in ("optional", "repeated") and oneof is None:
            self.take()
            field.label = FD.LABEL_REPEATED if label == "repeated" else FD.LABEL_OPTIONAL
            field.proto3_optional = label == "optional"
        else:
            field.label = FD.LABEL_OPTIONAL
        kind = self.take()
        if kind == "map":
            self.map_field(message, field)
        else:
            _set_type(field, kind)
            field.name = self.take()
        self.take("=")
        field.number = self.number()
        self.skip_options()
        self.take(";")
        if oneof is not None:
            field.oneof_index = oneof

    def map_field(
        self, message: descriptor_pb2.DescriptorProto, field: descriptor_pb2.FieldDescriptorProto
    ) -> None:
        """``map<K, V> name``: a repeated field of a synthesised ``NameEntry`` message."""
        self.take("<")
        key = self.take()
        self.take(",")
        value = self.take()
        self.take(">")
        field.name = self.take()
        entry = message.nested_type.add(name=_camel(field.name) + "Entry")
        entry.options.map_entry = True
        for number, (name, kind) in enumerate((("key", key), ("value", value)), start=1):
            part = entry.field.add(name=name, number=number, label=FD.LABEL_OPTIONAL)
            _set_type(part, kind)
        field.label = FD.LABEL_REPEATED
        field.type_name = entry.name

    def enum(self, enum: descriptor_pb2.EnumDescriptorProto) -> None:
        enum.name = self.take()
        self.take("{")
        while (word := self.peek()) != "}":
            if word in ("option", "reserved"):
                self.skip_statement()
            elif word == ";":
                self.take()
            else:
                value = enum.value.add(name=self.take())
                self.take("=")
                value.number = self.number()
                self.skip_options()
                self.take(";")
        self.take("}")


def _set_type(field: descriptor_pb2.FieldDescriptorProto, kind: str) -> None:
    if kind in SCALARS:
        field.type = SCALARS[kind]
    else:
        field.type_name = kind  # a message or an enum: the pool resolves it


def _synthetic_oneofs(message: descriptor_pb2.DescriptorProto) -> None:
    """proto3 ``optional``: each such field alone in a oneof ``_name``, after the real ones."""
    for field in message.field:
        if field.proto3_optional:
            field.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name="_" + field.name)


def _camel(name: str) -> str:
    """protoc's map entry name: ``my_field`` gives ``MyFieldEntry``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def parse(text: str, name: str = "schema.proto") -> descriptor_pb2.FileDescriptorProto:
    """The file descriptor of ``text`` (type names unresolved); a clear error otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise _refused("the schema is empty")
    return _Parser(text).file(name)
