"""A ``.proto`` file's text as a ``FileDescriptorProto``, compiled by ``protoc``.

Why here: the registry's Protobuf values are encoded from a descriptor, and the schema
registered is that descriptor (base64, as confluent-kafka's ``ProtobufSerializer`` registers
it); a schema comes as ``.proto`` text (the user's, or the one derived from the columns).
``protoc`` itself compiles it: ``grpcio-tools`` (the ``registry`` extra) ships it with
Google's well-known ``.proto`` files. It runs as its own process (``python -m
grpc_tools.protoc``): that is its command line, its errors come back on stderr, and
importing ``grpc_tools.protoc`` would add import hooks and a ``sys.path`` entry to this one.
What the encoder cannot write is refused here by name: a syntax other than proto3, an
import other than Google's Timestamp (the only one protobuf-java's side resolves).
"""

from __future__ import annotations

import importlib.util
import logging
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2

from ..errors import ConfigurationError

log = logging.getLogger(__name__)

#: The one import a schema may name: Google's Timestamp (protobuf-java has it built in).
TIMESTAMP_IMPORT = "google/protobuf/timestamp.proto"
#: protoc compiles one small file in well under a second; this bounds a stuck process.
PROTOC_TIMEOUT_S = 60.0


def parse(text: str, name: str = "schema.proto") -> descriptor_pb2.FileDescriptorProto:
    """The file descriptor of ``text``, type names resolved by ``protoc``; a clear error
    when it does not compile or uses what the encoder cannot write."""
    if not isinstance(text, str) or not text.strip():
        raise _refused("the schema is empty")
    proto = _protoc(text, name)
    if proto.syntax != "proto3":
        said = proto.syntax or "proto2"
        raise _refused(f'syntax "{said}": proto3 only (the file needs syntax = "proto3";)')
    others = [d for d in proto.dependency if d != TIMESTAMP_IMPORT]
    if others:
        raise _refused(f'import "{others[0]}": only "{TIMESTAMP_IMPORT}" is supported')
    if not proto.message_type:
        raise _refused("no message")
    return proto


def _protoc(text: str, name: str) -> descriptor_pb2.FileDescriptorProto:
    """``protoc --descriptor_set_out`` on ``text`` saved as ``name`` in a directory of its
    own (the well-known imports come from grpcio-tools' include directory)."""
    if importlib.util.find_spec("grpc_tools") is None:
        raise ConfigurationError(
            "a registry Protobuf schema is compiled by protoc, from grpcio-tools: pip install "
            "'airflow-provider-kafka2pc[registry]'; nothing was written"
        )
    with tempfile.TemporaryDirectory(prefix="kafka2pc-proto-") as work:
        (Path(work) / name).write_text(text, encoding="utf-8")
        out = Path(work) / "descriptor.pb"
        command = [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={work}"]
        command += [f"--descriptor_set_out={out}", name]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise _refused(f"protoc did not finish in {PROTOC_TIMEOUT_S:.0f} s") from None
        said = _said(done.stderr, work)
        if done.returncode != 0:
            raise _refused(said or f"protoc exited with {done.returncode}")
        if said:
            log.warning("protoc: %s", said)
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return files.file[0]


def _said(stderr: str, work: str) -> str:
    """protoc's messages, without abseil's notice about its own logging, the log prefix
    (``W0000 00:00:... parser.cc:659] ``) and the temporary directory."""
    lines = [_LOG_PREFIX.sub("", line.replace(f"{work}/", "")) for line in stderr.splitlines()]
    return "\n".join(line for line in lines if line and not line.startswith(_ABSL_NOTICE))


_LOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")
_ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog()"


def _refused(problem: str) -> ConfigurationError:
    return ConfigurationError(f"the Protobuf schema does not parse: {problem}; nothing was written")
