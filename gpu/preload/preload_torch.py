"""The interposer's PyTorch check (run under LD_PRELOAD=libgpud_preload.so).

    preload_torch.py info        prints "meminfo FREE TOTAL" from torch.cuda.mem_get_info()
    preload_torch.py alloc GIB   one tensor of GIB GiB, written: exit 0 when it was allocated,
                                 10 on torch.cuda.OutOfMemoryError; prints "held" while it
                                 holds it for PRELOAD_CHECK_HOLD_MS milliseconds
    preload_torch.py grow TOTAL STEP   grows to TOTAL GiB in tensors of STEP GiB, computing on
                                 each, holds PRELOAD_CHECK_HOLD_MS, frees: exit 0 when it got
                                 all of it, 10 on out-of-memory
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True takes the VMM path (cuMemCreate)."""

import os
import sys
import time

import torch


def main() -> int:
    mode = sys.argv[1]
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the context
    free, total = torch.cuda.mem_get_info()
    print(f"meminfo {free} {total}", flush=True)
    if mode == "info":
        return 0
    if mode == "grow":
        total, step = float(sys.argv[2]), float(sys.argv[3])
        held = []
        start = time.monotonic()
        try:
            while len(held) * step < total:
                t = torch.empty(int(step * 2**30), dtype=torch.uint8, device="cuda")
                t.fill_(len(held) % 251)
                held.append(t)
                torch.cuda.synchronize()
                print(f"holding {len(held) * step:g} GiB after {time.monotonic() - start:.1f} s",
                      flush=True)
        except torch.cuda.OutOfMemoryError as e:
            print(f"out of memory at {len(held) * step:g} GiB: {str(e).splitlines()[0]}",
                  flush=True)
            return 10
        print("held", flush=True)
        time.sleep(int(os.environ.get("PRELOAD_CHECK_HOLD_MS", "0")) / 1000)
        print(f"done after {time.monotonic() - start:.1f} s", flush=True)
        return 0
    n = int(float(sys.argv[2]) * 2**30)
    try:
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as e:
        print(f"out of memory: {str(e).splitlines()[0]}", flush=True)
        return 10
    free, total = torch.cuda.mem_get_info()
    print(f"meminfo {free} {total}", flush=True)
    print("held", flush=True)
    time.sleep(int(os.environ.get("PRELOAD_CHECK_HOLD_MS", "0")) / 1000)
    print(f"allocated {n} bytes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
