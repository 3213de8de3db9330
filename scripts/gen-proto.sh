#!/usr/bin/env bash
# Regenerate the Python protobuf modules of Canal's wire protocol from canal_core/protocol/proto/*.proto.
#
#   scripts/gen-proto.sh            writes CanalProtocol_pb2.py(i) and EntryProtocol_pb2.py(i) next to the .proto files
#   scripts/gen-proto.sh OUT_DIR    writes them to OUT_DIR instead (the unit test compares that with the committed files)
#
# Uses protoc from grpcio-tools in the project's virtualenv (a dev dependency), so the output depends only on the
# .proto files and that pinned version: run it after any .proto change and commit the result.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
src="$root/canal_core/protocol/proto"
out="${1:-$src}"
mkdir -p "$out"

cd "$src"
"$python" -m grpc_tools.protoc -I . --python_out="$out" --pyi_out="$out" CanalProtocol.proto EntryProtocol.proto
