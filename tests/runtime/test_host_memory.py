"""glibc's mmap threshold held on a CPU run (runtime/host_memory.py): a freed block does not raise it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coreward.runtime.errors import CorewardError


PROBE = r"""
import ctypes, sys
from coreward.runtime.host_memory import hold_mmap_threshold
libc = ctypes.CDLL("libc.so.6")
class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
print(hold_mmap_threshold(int(sys.argv[1])))
libc.free(libc.malloc(8 << 20))  # glibc's default: this free raises the threshold to 8 MiB
block = libc.malloc(2 << 20)
print(libc.mallinfo2().hblkhd >= 2 << 20)  # the 2 MiB block is its own mapping (freed to the system), not heap
"""


def probe(threshold: int) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(threshold)], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    return out.stdout.split("\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_held_threshold_keeps_large_blocks_mapped_after_a_larger_one_is_freed():
    held = probe(1 << 20)
    assert held[0].startswith("host memory: glibc's mmap threshold held at 1 MiB") and held[1] == "True"
    default = probe(0)  # glibc's own rule: after the 8 MiB free a 2 MiB block comes from the heap, kept when freed
    assert default[:2] == ["None", "False"]


def test_the_threshold_is_checked():
    from coreward.grpo.config import as_train_config

    with pytest.raises(CorewardError, match="host_mmap_threshold"):
        as_train_config("configs/demo/rule.yaml", ["host_mmap_threshold=67108864"])
    assert as_train_config("configs/demo/rule.yaml", ["host_mmap_threshold=0"]).host_mmap_threshold == 0
