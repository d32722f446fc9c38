//! How much host memory a proof needs: the host leases the pipeline asks gpud for, beside the
//! VRAM of [`crate::vram`] (docs/HOST.md describes the host pools).
//!
//! Sizes come from the key's shape, so they are known before a partition is synthesized. Every
//! vector the prover fills by pushing grows by doubling (Rust's `Vec`, at least 4 elements), so
//! its capacity is `⌈n⌉₂`, the next power of two of its length; Fr elements are 32 bytes:
//!
//! | what | bytes | held |
//! |---|---|---|
//! | **synthesis**: the A, B, C evaluations (one per constraint, at most `m = 2^k`; C only when kept) | `3·32·⌈m⌉₂` (`2·` without C) | synthesis → GPU phase |
//! | the aux and input assignments | `32·(⌈|L|⌉₂ + ⌈|IC|⌉₂)` | synthesis → CPU tail |
//! | the three densities (a bit per variable, in 64-bit words) | `8·(2·⌈|L|/64⌉₂ + ⌈|IC|/64⌉₂)` | synthesis → CPU tail |
//! | **GPU phase**: the A and B query scalars selected for their MSMs | `32·(|A| + ⌈|B|⌉₂)` | inside the phase |
//! | the CPU engine's byte form of the largest MSM's scalars | `32·m` | inside the phase |
//! | **CPU tail** with G2 on the CPU: the B scalars and their byte form | `64·⌈|B|⌉₂` | inside the tail |
//!
//! A partition's memory lease ([`HostEstimate::partition`]) is the synthesis plus the larger of
//! the phase's and the tail's scratch: it is held from the start of synthesis to the end of
//! the CPU tail, so it covers every step of the partition. The proving key itself
//! ([`HostEstimate::key`]: 96 bytes per G1 point, 192 per G2 point) and whatever page-locked
//! memory the engine keeps ([`crate::Engine::host_pinned`]) are the process's, leased
//! once for the run.

use serde::Serialize;

use crate::lease::HostNeeds;
use crate::vram::KeyShape;

const FR: u64 = 32;
const G1_AFFINE: u64 = 96;
const G2_AFFINE: u64 = 192;

/// What a vector of `n` elements pushed one by one holds: at least 4 elements, then doubling.
pub fn grown_capacity(n: usize) -> u64 {
    if n == 0 {
        0
    } else {
        n.max(4).next_power_of_two() as u64
    }
}

/// Page-locked host memory an engine keeps ([`crate::Engine::host_pinned`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PinnedHost {
    /// The key's bases, page-locked in place: memory the key occupies anyway.
    pub bases: u64,
    /// Staging buffers of one phase: memory of their own.
    pub staging: u64,
}

impl PinnedHost {
    /// Everything page-locked.
    pub fn total(&self) -> u64 {
        self.bases.saturating_add(self.staging)
    }
}

/// Host memory of one proof with a key, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HostEstimate {
    /// The proving key's bases in memory (G1 queries and B_G2), held by the process.
    pub key: u64,
    /// One partition's synthesized assignment: evaluations, assignments, densities.
    pub synthesis: u64,
    /// What the GPU phase adds on the host while it runs.
    pub phase: u64,
    /// What the CPU tail adds when it computes the G2 MSM (0 when the phase did).
    pub tail: u64,
}

impl HostEstimate {
    /// The memory lease of one partition: its assignment and the larger of the phase's and
    /// the tail's scratch (they run one after the other).
    pub fn partition(&self) -> u64 {
        self.synthesis.saturating_add(self.phase.max(self.tail))
    }
}

/// The host memory of a proof with a key of `shape` and `inputs` public inputs (with the
/// leading one: the verifying key's `ic` length) over a domain of `2^log_domain`; `g2_in_tail`
/// when the CPU tail computes the G2 MSM, `keep_c` when synthesis stores the C evaluations
/// ([`crate::synthesis::SynthesisOptions::keep_c`]).
pub fn estimate(
    shape: &KeyShape,
    inputs: usize,
    log_domain: u32,
    g2_in_tail: bool,
    keep_c: bool,
) -> HostEstimate {
    let m = 1usize << log_domain;
    let aux = shape.l;
    let words = |n: usize| grown_capacity(n.div_ceil(64)) * 8;
    let evaluations = if keep_c { 3 } else { 2 };
    let synthesis = FR
        * (evaluations * grown_capacity(m) + grown_capacity(aux) + grown_capacity(inputs))
        + 2 * words(aux)
        + words(inputs);
    let phase = FR * (shape.a as u64 + grown_capacity(shape.b_g1) + m as u64);
    let tail = if g2_in_tail {
        2 * FR * grown_capacity(shape.b_g2)
    } else {
        0
    };
    HostEstimate {
        key: bases_bytes(shape, true),
        synthesis,
        phase,
        tail,
    }
}

/// Bytes of the key's bases in memory: its G1 queries, and B_G2 with `g2`.
pub fn bases_bytes(shape: &KeyShape, g2: bool) -> u64 {
    let g2 = if g2 { G2_AFFINE * shape.b_g2 as u64 } else { 0 };
    G1_AFFINE * (shape.h + shape.l + shape.a + shape.b_g1) as u64 + g2
}

/// What a process's resident host lease asks for: the memory it holds now (at least the key's
/// bases, `key_bytes`) and the staging buffers its phases will page-lock on top, with
/// everything the engine keeps page-locked (`pinned`).
pub fn resident_needs(key_bytes: u64, pinned: PinnedHost) -> HostNeeds {
    let now = process_rss().unwrap_or(0).max(key_bytes);
    HostNeeds {
        mem_bytes: now.saturating_add(pinned.staging),
        pinned_bytes: pinned.total(),
        cpus: 0,
    }
}

/// This process's resident memory now (`VmRSS` of `/proc/self/status`), in bytes; `None`
/// where it cannot be read.
pub fn process_rss() -> Option<u64> {
    rss_of_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// `VmRSS` of a `/proc/PID/status` text, in bytes.
pub fn rss_of_status(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuits::CircuitSpec;
    use crate::synthesis::{SynthesisOptions, synthesize};

    #[test]
    fn capacities_grow_like_vec() {
        for n in [1usize, 3, 4, 5, 17, 1000, 4096, 4097] {
            let mut v: Vec<u64> = Vec::new();
            for i in 0..n {
                v.push(i as u64);
            }
            assert_eq!(v.capacity() as u64, grown_capacity(n), "{n}");
        }
        assert_eq!(grown_capacity(0), 0);
    }

    /// The synthesis estimate against the bytes an actual assignment holds: exact for the
    /// synthetic circuit (it fills its domain), an upper bound for the others.
    #[test]
    fn synthesis_estimate_matches_measured_assignments() {
        for ((circuit, k), keep_c) in [("synthetic", 10), ("synthetic", 13), ("poseidon", 12)]
            .into_iter()
            .flat_map(|c| [(c, true), (c, false)])
        {
            let spec = CircuitSpec::parse(circuit, k).unwrap();
            let opts = SynthesisOptions {
                keep_c,
                ..Default::default()
            };
            let cs = synthesize(spec.with_witness(3), opts).unwrap();
            let measured = cs.heap_bytes();
            let log_domain = cs.num_constraints().next_power_of_two().trailing_zeros();
            // The shape a key for this circuit has: one L point per aux variable.
            let shape = KeyShape {
                h: (1 << log_domain) - 1,
                l: cs.aux.len(),
                a: cs.input.len() + cs.a_aux_density.count(),
                b_g1: cs.b_input_density.count() + cs.b_aux_density.count(),
                b_g2: cs.b_input_density.count() + cs.b_aux_density.count(),
            };
            let e = estimate(&shape, cs.input.len(), log_domain, true, keep_c);
            let what = format!("{circuit} 2^{k}, C kept {keep_c}");
            assert!(e.synthesis >= measured, "{what}: {e:?} < {measured}");
            if circuit == "synthetic" {
                assert_eq!(e.synthesis, measured, "{what}");
            } else {
                assert!(
                    e.synthesis as f64 <= 2.0 * measured as f64,
                    "{what}: {e:?} against {measured}"
                );
            }
            assert!(e.partition() > e.synthesis);
            assert!(e.tail > 0);
            assert_eq!(
                estimate(&shape, cs.input.len(), log_domain, false, keep_c).tail,
                0
            );
        }
    }

    #[test]
    fn at_2_22_a_partition_is_half_a_gib_beside_a_key_of_1_7_gib() {
        let m = 1usize << 22;
        let shape = KeyShape {
            h: m - 1,
            l: m - 2,
            a: m - 1,
            b_g1: m / 2,
            b_g2: m / 2,
        };
        let e = estimate(&shape, 2, 22, false, true);
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        // a, b, c and aux: four 128 MiB vectors, plus densities.
        assert!((0.5..0.51).contains(&gib(e.synthesis)), "{e:?}");
        // A and B scalars and one m-sized temporary: 128 + 64 + 128 MiB.
        assert!((0.31..0.32).contains(&gib(e.phase)), "{e:?}");
        // 3.5·m G1 points and m/2 G2 points: 432 bytes per domain point.
        assert!((1.68..1.69).contains(&gib(e.key)), "{e:?}");
    }

    #[test]
    fn this_process_has_a_resident_size() {
        assert_eq!(
            rss_of_status("Name:\tx\nVmRSS:\t  2048 kB\n"),
            Some(2 << 20)
        );
        assert_eq!(rss_of_status("Name:\tx\n"), None);
        let rss = process_rss().expect("/proc/self/status");
        assert!(rss > 1 << 20, "{rss}");
    }
}
