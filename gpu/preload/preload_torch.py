"""The interposer's PyTorch check (run under LD_PRELOAD=libgpud_preload.so).

    preload_torch.py info        prints "meminfo FREE TOTAL" from torch.cuda.mem_get_info()
    preload_torch.py alloc GIB   one tensor of GIB GiB, written: exit 0 when it was allocated,
                                 10 on torch.cuda.OutOfMemoryError; prints "held" while it
                                 holds it for PRELOAD_CHECK_HOLD_MS milliseconds
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
