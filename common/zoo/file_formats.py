"""Whether a downloaded file is whole, read from its own structure when no digest vouches for it: a zip's
central directory, a safetensors header, a compressed stream's end marker, HDF5's end-of-file address,
a tar's end-of-archive block, every record of an MXNet .params file (zoo.io.download calls these)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import pathlib
import struct
import tarfile

_ZIP = b"PK\x03\x04"
_HDF5 = b"\x89HDF\r\n\x1a\n"
_CHUNK = 1 << 20


def cut_short(path: pathlib.Path, head: bytes) -> str | None:
    """Why a file whose first bytes look right is not whole (a zip without its central directory, a
    safetensors file shorter than its header says, a gzip stream cut off), or None. With no digest to
    check, this reads the file to its end: a truncated download is never cached as whole."""
    import json
    import zipfile

    size = path.stat().st_size
    if head.startswith(_ZIP):  # torch.save, zip, and the zip-packed formats: the directory sits at the end
        try:
            with zipfile.ZipFile(path) as archive:
                archive.infolist()
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            return f"a zip cut short or damaged ({e})"
    elif len(head) >= 9 and head[8:9] == b"{":  # safetensors: the header names every tensor's byte range
        header_size = int.from_bytes(head[:8], "little")
        try:
            with open(path, "rb") as f:
                f.seek(8)
                header = json.loads(f.read(header_size))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            return f"a safetensors header that cannot be read ({e})"
        if 8 + header_size + end > size:
            return f"{size} bytes, shorter than the {8 + header_size + end} its safetensors header names"
    elif head.startswith(b"\x1f\x8b"):
        try:
            with gzip.open(path, "rb") as stream:
                while stream.read(1 << 20):
                    pass
        except (OSError, EOFError) as e:
            return f"a gzip stream cut short or damaged ({e})"
    return None


def hdf5_cut_short(head: bytes, size: int) -> str | None:
    """Why an HDF5 file is shorter than the end-of-file address its superblock records, or None."""
    start = next(offset for offset in (0, 512, 1024, 2048) if head[offset : offset + 8] == _HDF5)
    block = head[start:]
    version = block[8] if len(block) > 8 else None
    if version in (
        0,
        1,
    ):  # signature, 8 version/size bytes, 2 + 2 node sizes, 4 flags, (v1: 4 more), addresses
        offset_size, addresses = block[13], 24 + 4 * version
    elif version in (2, 3):  # signature, version, offset and length sizes, flags, addresses
        offset_size, addresses = block[9], 12
    else:
        return f"an HDF5 superblock of unknown version {version}"
    if offset_size not in (2, 4, 8) or len(block) < addresses + 3 * offset_size:
        return "an HDF5 superblock cut short or damaged"
    # base address, free-space or extension address, then the end-of-file address (the file's size,
    # user block included: the HDF5 library refuses a file shorter than it as truncated)
    at = addresses + 2 * offset_size
    end = int.from_bytes(block[at : at + offset_size], "little")
    if end > size:
        return f"{size} bytes, shorter than the {end} its HDF5 superblock names"
    return None


def tar_cut_short(path: pathlib.Path, head: bytes) -> str | None:
    """Why a tar archive (plain or compressed) does not run to its end-of-archive block, or None: every
    member header is read and its data skipped to, then the zero block after them, then the compressed
    stream to its end."""
    import gzip

    openers = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
    opener = next((o for magic, o in openers.items() if head.startswith(magic)), open)
    try:
        with opener(path, "rb") as stream:
            with tarfile.open(fileobj=stream, mode="r:") as archive:
                members = sum(1 for _ in archive)  # data is seeked over: a short member ends the listing
                end = archive.offset
            stream.seek(end)
            closing = stream.read(tarfile.BLOCKSIZE)
            while stream.read(_CHUNK):  # a compressed stream's checksum and end marker sit at its end
                pass
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError) as e:
        return f"a tar archive cut short or damaged ({e})"
    if closing != tarfile.NUL * tarfile.BLOCKSIZE:
        return f"a tar archive cut short: no end-of-archive block after its {members} members"
    return None


# NDArray records of MXNet's .params files (src/ndarray/ndarray.cc): the magic of each record layout,
# the auxiliary arrays of each storage type (dense, row_sparse, csr) and each dtype's size in bytes.
_MX_V1, _MX_V2, _MX_V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
_MX_AUX_ARRAYS = {0: 0, 1: 1, 2: 2}
_MX_ITEM_SIZE = {0: 4, 1: 8, 2: 2, 3: 1, 4: 4, 5: 1, 6: 8, 7: 1, 8: 2, 9: 2, 10: 4, 11: 8, 12: 2}


class Damaged(Exception):
    pass


def mxnet_params_cut_short(path: pathlib.Path, size: int) -> str | None:
    """Why an MXNet NDArray file is not whole, or None: every array record and name is walked, and the
    walk must end at the file's last byte."""

    with open(path, "rb") as f:

        def read(fmt: str):
            data = f.read(struct.calcsize(fmt))
            if len(data) < struct.calcsize(fmt):
                raise EOFError
            return struct.unpack("<" + fmt, data)

        def skip(count: int) -> None:
            if count < 0 or f.seek(count, 1) > size:
                raise EOFError

        def shape(dim: str = "q") -> tuple:
            (ndim,) = read("i")
            if not -1 <= ndim <= 32:
                raise Damaged(f"an array of {ndim} dimensions")
            dims = read(dim * ndim) if ndim > 0 else ()
            if any(d < 0 for d in dims):
                raise Damaged(f"an array of shape {dims}")
            return dims if ndim >= 0 else None

        def elements(dims: tuple) -> int:
            count = 1
            for d in dims:
                count *= d
            return count

        def skip_array() -> None:
            (magic,) = read("I")
            stype = 0
            if magic in (_MX_V2, _MX_V3):
                (stype,) = read("i")
                if stype not in _MX_AUX_ARRAYS:
                    raise Damaged(f"storage type {stype}")
            if magic in (_MX_V1, _MX_V2, _MX_V3):
                if _MX_AUX_ARRAYS[stype]:
                    shape()  # the storage shape: the sizes below follow the auxiliary arrays instead
                dims = shape()
                if dims is None or (magic != _MX_V3 and not dims):  # an empty (none) array ends here
                    return
            else:  # the oldest layout: the record opens with its dimension count and 32-bit dims
                f.seek(-4, 1)
                dims = shape("I")
                if not dims:
                    return
            read("ii")  # the device it was saved from
            (dtype,) = read("i")
            if dtype not in _MX_ITEM_SIZE:
                raise Damaged(f"dtype {dtype}")
            aux = []  # (elements, bytes): row_sparse's row indices; csr's row pointers, column indices
            for _ in range(_MX_AUX_ARRAYS[stype]):
                (aux_dtype,) = read("i")
                if aux_dtype not in _MX_ITEM_SIZE:
                    raise Damaged(f"dtype {aux_dtype}")
                count = elements(shape())
                aux.append((count, count * _MX_ITEM_SIZE[aux_dtype]))
            if stype == 1:  # the stored rows, each of the dense row's size
                values = aux[0][0] * elements(dims[1:])
            else:  # dense: every element; csr: one per column index
                values = aux[-1][0] if aux else elements(dims)
            skip(values * _MX_ITEM_SIZE[dtype])
            for _, length in aux:
                skip(length)

        try:
            _, _, arrays = read("QQQ")
            for _ in range(arrays):
                skip_array()
            (names,) = read("Q")
            if names not in (0, arrays):
                raise Damaged(f"{names} names for {arrays} arrays")
            for _ in range(names):
                skip(read("Q")[0])
            end = f.tell()
        except EOFError:
            return f"an MXNet NDArray file cut short: its records run past its {size} bytes"
        except (Damaged, struct.error) as e:
            return f"an MXNet NDArray file damaged ({e})"
    if end != size:
        return f"an MXNet NDArray file damaged ({size - end} bytes after its last record)"
    return None


def what_it_looks_like(head: bytes) -> str:
    """A few words on what a rejected file holds: an HTML page, text, or its first bytes."""
    if not head:
        return "an empty file"
    text = head.decode("utf-8", errors="replace")
    if b"\x00" in head or text.count("\ufffd") > 4:
        return f"bytes {head[:8].hex()}"
    snippet = " ".join(text.split())[:60]
    if snippet.lower().startswith(("<!doctype html", "<html")) or "<body" in text.lower():
        return f"an HTML page ({snippet!r})"
    return f"text ({snippet!r})"
