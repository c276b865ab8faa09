"""Pieces shared by the check scripts in tools/ (hf_check.py, loss_torch_check.py, post_training_torch_check.py and
its self-test): where a built binary is, and safetensors files (the format of engine/checkpoint/safetensors.h) read
and written without the safetensors package (Debian's torch has none, and the dry runs have no torch at all).

Importing this module imports nothing beyond the standard library: the torch functions import torch when called.
Each script keeps its own messages and exit codes; these functions return values or raise.
"""

import json
import os
import shutil
import struct
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD_FOLDERS = ("build/device/bin", "build/cuda/bin", "build/cpu/bin")  # the staged device build first


def find_built_binary(name, explicit=None, fall_back=True, search_path=False):
    """The first executable of: `explicit` when given, then (unless `explicit` and not `fall_back`) `name` in
    BUILD_FOLDERS, then on PATH with `search_path`. Returns (path or None, the candidates looked at) so that the
    caller can say where it looked."""
    candidates = [Path(explicit)] if explicit else []
    if not explicit or fall_back:
        candidates += [ROOT / folder / name for folder in BUILD_FOLDERS]
        if search_path and shutil.which(name):
            candidates.append(Path(shutil.which(name)))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate, candidates
    return None, candidates


def _header(data):
    """The JSON header of a safetensors file's bytes and the offset where the tensor data begins."""
    (size,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + size]), 8 + size


def read_safetensors(path):
    """{name: (dtype, shape, list of floats)} of an F32 / BF16 safetensors file, in pure Python (no torch)."""
    data = Path(path).read_bytes()
    header, start = _header(data)
    result = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[start + begin:start + end]
        if entry["dtype"] == "F32":
            values = array("f", raw).tolist()
        elif entry["dtype"] == "BF16":
            values = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        else:
            raise RuntimeError(f"{path}: {name} has dtype {entry['dtype']}")
        result[name] = (entry["dtype"], entry["shape"], values)
    return result


def _torch_dtypes():
    import torch
    return {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
            torch.int64: "I64", torch.int32: "I32"}


def save_safetensors(path, tensors):
    """Writes {name: torch tensor} (moved to the CPU) as a safetensors file, header padded to 8 bytes."""
    import torch
    codes = _torch_dtypes()
    header, chunks, offset = {}, [], 0
    for name, tensor in tensors.items():
        tensor = tensor.detach().to("cpu").contiguous()
        data = (tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor).numpy().tobytes()
        header[name] = {"dtype": codes[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))


def load_safetensors(path):
    """({name: torch tensor in the file's dtype}, the header's __metadata__) of a safetensors file."""
    import torch
    data = Path(path).read_bytes()
    header, start = _header(data)
    metadata = header.pop("__metadata__", {})
    by_code = {code: dtype for dtype, code in _torch_dtypes().items()}
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = by_code[info["dtype"]]
        chunk = bytearray(data[start + begin:start + end])
        flat = torch.frombuffer(chunk, dtype=dtype) if chunk else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"]).clone()
    return tensors, metadata
