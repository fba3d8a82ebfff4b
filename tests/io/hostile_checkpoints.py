"""Hostile PyTorch checkpoints, made byte by byte: the files io/torch_checkpoint.h must refuse
within its bounds. Shared by tests/io/make_checkpoint_reference.py (the reader's own tests) and
tests/cli/hostile_input_test.py (the CLI's time and memory bounds).

  terabyte_storage   a storage whose pickle claims 1 TB (2^38 floats); the file holds 16 bytes
  short_storage      a tensor of 100 elements on a storage of 4
  many_tensors       a state dict of 100,000 tensors (one shared storage)
  nested_lists       a pickle of 10^6 lists, each inside the next
  zip_bomb_claim     a deflated entry of a few hundred bytes that claims to inflate to 1 TB
  zip_bomb_overlap   many entries sharing one deflated kernel (the overlapping-entry zip bomb)
  code_global        a pickle that calls posix.system (what pickle.load would run)
"""
import struct
import zlib
from pathlib import Path

# Pickle opcodes (protocol 2), spelled out: these files are made by hand, not by pickle.
PROTO2 = b"\x80\x02"
STOP = b"."
MARK = b"("
EMPTY_DICT = b"}"
EMPTY_LIST = b"]"
EMPTY_TUPLE = b")"
APPEND = b"a"
SETITEMS = b"u"
TUPLE = b"t"
REDUCE = b"R"
BINPERSID = b"Q"
NEWFALSE = b"\x89"


def binunicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def global_(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def integer(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if -(2 ** 31) <= value < 2 ** 31:
        return b"J" + struct.pack("<i", value)
    data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data


def int_tuple(values) -> bytes:
    return MARK + b"".join(integer(v) for v in values) + TUPLE


def tensor(key: str, numel: int, sizes, strides, offset: int = 0) -> bytes:
    """_rebuild_tensor_v2 of a float storage `key` claiming `numel` elements."""
    storage = (MARK + binunicode("storage") + global_("torch", "FloatStorage") + binunicode(key) +
               binunicode("cpu") + integer(numel) + TUPLE + BINPERSID)
    hooks = global_("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE
    return (global_("torch._utils", "_rebuild_tensor_v2") + MARK + storage + integer(offset) +
            int_tuple(sizes) + int_tuple(strides) + NEWFALSE + hooks + TUPLE + REDUCE)


def state_dict_pickle(entries) -> bytes:
    """A dict of (name, tensor pickle) pairs."""
    body = b"".join(binunicode(name) + value for name, value in entries)
    return PROTO2 + EMPTY_DICT + MARK + body + SETITEMS + STOP


def zip_file(entries, deflate=()) -> bytes:
    """A zip archive of (name, bytes) entries, stored, or deflated for the names in `deflate`."""
    local, central = b"", b""
    for name, data in entries:
        method = 8 if name in deflate else 0
        body = zlib.compress(data)[2:-4] if method == 8 else data
        header = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0,
                             zlib.crc32(data), len(body), len(data), len(name), 0)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0,
                               zlib.crc32(data), len(body), len(data), len(name), 0, 0, 0, 0, 0,
                               len(local)) + name.encode()
        local += header + name.encode() + body
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central),
                      len(local), 0)
    return local + central + end


def torch_zip(pickle: bytes, storages: dict) -> bytes:
    entries = [("archive/data.pkl", pickle), ("archive/byteorder", b"little")]
    entries += [(f"archive/data/{key}", data) for key, data in storages.items()]
    entries.append(("archive/version", b"3\n"))
    return zip_file(entries)


def terabyte_storage(path: Path) -> None:
    numel = 2 ** 38
    pickle = state_dict_pickle([("weight", tensor("0", numel, [numel], [1]))])
    path.write_bytes(torch_zip(pickle, {"0": b"\0" * 16}))


def short_storage(path: Path) -> None:
    pickle = state_dict_pickle([("weight", tensor("0", 4, [10, 10], [10, 1]))])
    path.write_bytes(torch_zip(pickle, {"0": b"\0" * 16}))


def many_tensors(path: Path, count: int = 100_000) -> None:
    # Each tensor its own view of one storage: the pickle is all that grows.
    pickle = state_dict_pickle([(f"t{i}", tensor("0", 4, [4], [1])) for i in range(count)])
    path.write_bytes(torch_zip(pickle, {"0": b"\0" * 16}))


def nested_lists(path: Path, depth: int = 1_000_000) -> None:
    pickle = PROTO2 + EMPTY_LIST * depth + APPEND * (depth - 1) + STOP
    path.write_bytes(torch_zip(pickle, {}))


def zip_bomb_claim(path: Path) -> None:
    """data/0 deflated from 64 KB of zeros (a few hundred bytes), its directory entry claiming
    4 GB uncompressed, for a pickle that claims a 4 GB storage."""
    numel = 0xFFFFFFFC // 4
    pickle = state_dict_pickle([("weight", tensor("0", numel, [numel], [1]))])
    entries = [("archive/data.pkl", pickle), ("archive/data/0", b"\0" * 65536)]
    data = bytearray(zip_file(entries, deflate={"archive/data/0"}))
    central = data.rfind(b"PK\x01\x02")  # the last central header: data/0's
    struct.pack_into("<I", data, central + 24, 0xFFFFFFFC)
    path.write_bytes(bytes(data))


def zip_bomb_overlap(path: Path, copies: int = 1000) -> None:
    """One deflated kernel of 1 MB of zeros behind `copies` directory entries."""
    kernel = b"\0" * (1 << 20)
    body = zlib.compress(kernel, 9)[2:-4]
    header = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, zlib.crc32(kernel),
                         len(body), len(kernel), len("archive/data/0"), 0) + b"archive/data/0"
    pickle = state_dict_pickle([(f"w{i}", tensor(str(i), len(kernel) // 4, [len(kernel) // 4], [1]))
                                for i in range(copies)])
    pickle_header = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(pickle),
                                len(pickle), len(pickle), len("archive/data.pkl"), 0)
    local = pickle_header + b"archive/data.pkl" + pickle
    kernel_offset = len(local)
    local += header + body
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, zlib.crc32(pickle),
                          len(pickle), len(pickle), len("archive/data.pkl"), 0, 0, 0, 0, 0,
                          0) + b"archive/data.pkl"
    for i in range(copies):
        name = f"archive/data/{i}".encode()
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0,
                               zlib.crc32(kernel), len(body), len(kernel), len(name), 0, 0, 0, 0,
                               0, kernel_offset) + name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, copies + 1, copies + 1, len(central),
                      len(local), 0)
    path.write_bytes(local + central + end)


def code_global(path: Path) -> None:
    """What `pickle.dumps(obj)` writes for an object whose __reduce__ is (os.system, (cmd,))."""
    pickle = (PROTO2 + EMPTY_DICT + MARK + binunicode("weight") + global_("posix", "system") +
              MARK + binunicode("echo owned") + TUPLE + REDUCE + SETITEMS + STOP)
    path.write_bytes(torch_zip(pickle, {}))


ALL = {
    "terabyte_storage": terabyte_storage,
    "short_storage": short_storage,
    "many_tensors": many_tensors,
    "nested_lists": nested_lists,
    "zip_bomb_claim": zip_bomb_claim,
    "zip_bomb_overlap": zip_bomb_overlap,
    "code_global": code_global,
}
