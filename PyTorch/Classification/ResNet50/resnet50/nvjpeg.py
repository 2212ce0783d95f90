"""Batched JPEG decoding with nvJPEG on a CUDA stream the caller chooses (``DataConfig.decoder="nvjpeg"``).

``torchvision.io.decode_jpeg(device="cuda")`` runs nvJPEG on a stream of its own, taken from
PyTorch's low-priority pool when its decoder is made, and waits for that stream
(``cudaStreamSynchronize``) before it returns, under a process-wide lock. Beside a training step
that fills the GPU, the decoder's kernels queue behind the step's and the calling thread sleeps
until they ran. This module calls the same library (the copy torchvision ships) through ctypes:
the work goes to the caller's current stream (our prefetch thread's high-priority stream), the
images come out interleaved (HWC, which the fused crop kernel reads through strides), and the
call returns once the work is queued. The bitstreams and the decoder state of a batch stay
referenced until an event recorded after its decode has passed, so nothing the device still reads
is reused or freed.

Only what nvJPEG's hardware/batched path takes goes through it: 3-component baseline JPEGs.
Others (progressive, greyscale, CMYK, 4:1:0 / 4:1:1) are decoded by ``torchvision.io.decode_jpeg``.
"""

from __future__ import annotations

import ctypes
import glob
import os

import torch

NVJPEG_BACKEND_DEFAULT, NVJPEG_BACKEND_HARDWARE = 0, 3
NVJPEG_OUTPUT_RGBI = 5
NVJPEG_CSS_UNSUPPORTED_BY_HW = (4, 5, 7, -1)  # 4:1:1, 4:1:0, 4:1:0V, unknown
STATUS = {
    1: "NOT_INITIALIZED", 2: "INVALID_PARAMETER", 3: "BAD_JPEG", 4: "JPEG_NOT_SUPPORTED",
    5: "ALLOCATOR_FAILURE", 6: "EXECUTION_FAILED", 7: "ARCH_MISMATCH", 8: "INTERNAL_ERROR",
    9: "IMPLEMENTATION_NOT_SUPPORTED", 10: "INCOMPLETE_BITSTREAM",
}  # fmt: skip


class NvJpegError(RuntimeError):
    pass


class _Image(ctypes.Structure):  # nvjpegImage_t
    _fields_ = [("channel", ctypes.c_void_p * 4), ("pitch", ctypes.c_size_t * 4)]


def library_path() -> str:
    """The nvJPEG shared library: torchvision's own copy first (the one decode_jpeg uses), then the
    ``nvidia-nvjpeg`` wheel, then the system's."""
    import torchvision

    candidates = sorted(
        glob.glob(os.path.join(os.path.dirname(torchvision.__file__) + ".libs", "libnvjpeg*.so*"))
    )
    try:
        import nvidia.nvjpeg

        candidates += sorted(glob.glob(os.path.join(list(nvidia.nvjpeg.__path__)[0], "lib", "libnvjpeg.so*")))
    except ImportError:
        pass
    import ctypes.util

    system = ctypes.util.find_library("nvjpeg")
    candidates += [system] if system else []
    if not candidates:
        raise NvJpegError(
            "nvJPEG not found (looked in torchvision.libs, nvidia-nvjpeg and the system's libraries)"
        )
    return candidates[0]


_LIB = None


def _lib():
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(library_path())
        vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        signatures = {
            "nvjpegCreateEx": [i, vp, vp, ctypes.c_uint, ctypes.POINTER(vp)],
            "nvjpegJpegStateCreate": [vp, ctypes.POINTER(vp)],
            "nvjpegGetImageInfo": [vp, vp, sz, ctypes.POINTER(i), ctypes.POINTER(i), ctypes.POINTER(i), ctypes.POINTER(i)],
            "nvjpegDecodeBatchedInitialize": [vp, vp, i, i, i],
            "nvjpegDecodeBatched": [vp, vp, ctypes.POINTER(vp), ctypes.POINTER(sz), ctypes.POINTER(_Image), vp],
            "nvjpegJpegStreamCreate": [vp, ctypes.POINTER(vp)],
            "nvjpegJpegStreamParseHeader": [vp, vp, sz, vp],
            "nvjpegDecodeBatchedSupported": [vp, vp, ctypes.POINTER(i)],
        }  # fmt: skip
        for name, argtypes in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, i
        _LIB = lib
    return _LIB


def _check(status: int, what: str) -> None:
    if status != 0:
        raise NvJpegError(f"nvJPEG {what} failed: {STATUS.get(status, status)}")


class NvJpegDecoder:
    """Decodes lists of encoded JPEGs (1-D uint8 CPU tensors, pinned for asynchronous uploads) into
    uint8 ``[3, H, W]`` views of HWC images on ``device``, on the current CUDA stream.

    ``slots`` batches may be in flight; taking a slot again waits for the batch it last decoded.
    """

    def __init__(self, device, slots: int = 3):
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise NvJpegError("the nvjpeg decoder needs a CUDA device")
        lib = _lib()
        self.handle = ctypes.c_void_p()
        with torch.cuda.device(self.device):
            status = lib.nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, None, None, 0, ctypes.byref(self.handle))
            self.hardware = status == 0
            if status == 7:  # ARCH_MISMATCH: no JPEG engine on this GPU; batched decode on the SMs
                status = lib.nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, None, None, 0, ctypes.byref(self.handle))
            _check(status, "handle creation")
            self.states = []
            for _ in range(slots):
                state = ctypes.c_void_p()
                _check(lib.nvjpegJpegStateCreate(self.handle, ctypes.byref(state)), "state creation")
                self.states.append(state)
            self.stream_header = ctypes.c_void_p()
            _check(
                lib.nvjpegJpegStreamCreate(self.handle, ctypes.byref(self.stream_header)), "stream creation"
            )
        self.slot = 0
        self.in_flight: list = [None] * slots  # (event, references) of each slot's last batch

    def info(self, data: torch.Tensor) -> tuple[int, int, int, int]:
        """(components, chroma subsampling, height, width) from the JPEG header."""
        comps, css = ctypes.c_int(), ctypes.c_int()
        widths, heights = (ctypes.c_int * 4)(), (ctypes.c_int * 4)()
        _check(
            _lib().nvjpegGetImageInfo(
                self.handle,
                data.data_ptr(),
                data.numel(),
                ctypes.byref(comps),
                ctypes.byref(css),
                widths,
                heights,
            ),
            "header read",
        )
        return comps.value, css.value, heights[0], widths[0]

    def supported(self, data: torch.Tensor, comps: int, css: int) -> bool:
        if comps != 3 or css in NVJPEG_CSS_UNSUPPORTED_BY_HW:
            return False
        if not self.hardware:
            return True
        lib = _lib()
        if (
            lib.nvjpegJpegStreamParseHeader(self.handle, data.data_ptr(), data.numel(), self.stream_header)
            != 0
        ):
            return False
        ok = ctypes.c_int(-1)
        return (
            lib.nvjpegDecodeBatchedSupported(self.handle, self.stream_header, ctypes.byref(ok)) == 0
            and ok.value == 0
        )

    def decode(self, data: list) -> list:
        from torchvision.io import ImageReadMode, decode_jpeg

        out: list = [None] * len(data)
        batch, images = [], []
        for k, encoded in enumerate(data):
            if encoded.dim() != 1 or encoded.dtype != torch.uint8 or encoded.device.type != "cpu":
                raise NvJpegError("expected 1-D uint8 CPU tensors of encoded JPEG bytes")
            comps, css, height, width = self.info(encoded)
            if self.supported(encoded, comps, css):
                hwc = torch.empty(height, width, 3, dtype=torch.uint8, device=self.device)
                out[k] = hwc.permute(2, 0, 1)
                batch.append(k)
                images.append(hwc)
            else:
                out[k] = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=self.device)
        if batch:
            self._decode_batch([data[k].contiguous() for k in batch], images)
        return out

    def _decode_batch(self, encoded: list, images: list) -> None:
        lib, n = _lib(), len(encoded)
        slot = self.slot
        self.slot = (slot + 1) % len(self.states)
        if self.in_flight[slot] is not None:
            self.in_flight[slot][0].synchronize()  # the batch decoded with this state two calls ago
        pointers = (ctypes.c_void_p * n)(*[t.data_ptr() for t in encoded])
        lengths = (ctypes.c_size_t * n)(*[t.numel() for t in encoded])
        outputs = (_Image * n)()
        for j, image in enumerate(images):
            outputs[j].channel[0] = image.data_ptr()
            outputs[j].pitch[0] = image.shape[1] * 3
        stream = torch.cuda.current_stream(self.device)
        state = self.states[slot]
        _check(
            lib.nvjpegDecodeBatchedInitialize(self.handle, state, n, 1, NVJPEG_OUTPUT_RGBI), "batch set-up"
        )
        _check(
            lib.nvjpegDecodeBatched(self.handle, state, pointers, lengths, outputs, stream.cuda_stream),
            "decode",
        )
        event = torch.cuda.Event()
        event.record(stream)
        # The host bitstreams and tables must outlive the device's reads of them.
        self.in_flight[slot] = (event, (encoded, pointers, lengths, outputs))
