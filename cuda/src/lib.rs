//! Lease-aware CUDA layer.
