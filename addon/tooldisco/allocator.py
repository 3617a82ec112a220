"""Large blocks go straight back to the OS when freed (glibc's malloc only).

Why: glibc raises its mmap threshold each time a large mmapped block is freed (up to
32 MiB), so after the first 30 MB request body every later one is carved out of a heap
arena instead, and each worker thread has an arena of its own. Those arenas keep the
pages: measured, a few 30 MB bodies parsed in worker threads left 280-330 MiB resident
that no object held. A fixed threshold turns the adjustment off: blocks of 1 MiB and more
are mapped and unmapped on their own, so what a huge body took is given back when the
flow is done. Process-wide, so mitmproxy's own large buffers benefit too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # glibc <malloc.h>
THRESHOLD = 1 << 20


def return_large_blocks(threshold: int = THRESHOLD) -> bool:
    """Set glibc's mmap threshold; False where the C library is not glibc (nothing to do)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc only: musl has no mallopt tuning of this kind
    except (OSError, AttributeError):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))
