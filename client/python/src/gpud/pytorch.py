"""Keeps PyTorch's caching allocator within a lease's VRAM, when PyTorch is there.

PyTorch is never a dependency: :func:`limit_torch_memory` imports it only when called, and
does nothing (returning ``None``) when it cannot be imported or sees no CUDA device.

The limit is ``torch.cuda.set_per_process_memory_fraction(vram_bytes / total_memory, device)``,
where ``total_memory`` is the device's memory as PyTorch reports it, the number PyTorch
multiplies the fraction by. Past the limit PyTorch raises its out-of-memory error instead of
taking memory other tenants hold leases on. Call it again after :meth:`gpud.Lease.resize`.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Optional

from ._session import LeaseView

__all__ = ["limit_torch_memory", "torch_device"]


def _import_torch() -> Optional[Any]:
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def _uuid_text(value: Any) -> str:
    text = str(value)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def torch_device(lease: LeaseView, torch: Any) -> int:
    """The CUDA ordinal, as ``torch.cuda`` numbers devices in this process, of the leased
    device: 0 when ``CUDA_VISIBLE_DEVICES`` is the lease's (the process, or its parent,
    applied :attr:`~gpud.Lease.cuda_visible_devices`); else the device whose UUID matches;
    else the lease's gpud index."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() == lease.cuda_visible_devices:
        return 0
    count = int(torch.cuda.device_count())
    for ordinal in range(count):
        uuid = getattr(torch.cuda.get_device_properties(ordinal), "uuid", None)
        if uuid is not None and _uuid_text(uuid) == lease.device_uuid:
            return ordinal
    return lease.device_index


def limit_torch_memory(lease: LeaseView, device: Optional[int] = None) -> Optional[float]:
    """Limits PyTorch's allocations on the leased device to the lease's VRAM.

    ``device``: the CUDA ordinal to limit (default: found by :func:`torch_device`). Returns
    the fraction set, or ``None`` when nothing was set: PyTorch is not importable, CUDA is not
    available to it, or the lease reserves no memory (a compute-only lease: there is nothing
    to size the limit by).
    """
    torch = _import_torch()
    if torch is None or not torch.cuda.is_available() or lease.vram_bytes == 0:
        return None
    ordinal = torch_device(lease, torch) if device is None else device
    total = int(torch.cuda.get_device_properties(ordinal).total_memory)
    if total <= 0:
        return None
    fraction = min(1.0, lease.vram_bytes / total)
    torch.cuda.set_per_process_memory_fraction(fraction, ordinal)
    return fraction
