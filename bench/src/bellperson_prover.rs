//! bellperson's own prover (`create_proof`) as the engines benchmark's baseline: the same
//! circuit and key as our engines, timed like them, every proof verified, the first compared
//! bit for bit with ours, and where it ran read from bellperson's own log.
//!
//! Built with the crate's `bellperson-gpu` feature, bellperson proves with its CUDA kernels
//! (ec-gpu-gen) and silently falls back to the CPU when it finds no GPU or a kernel fails; its
//! `log` records are the only account of which happened, so [`bellperson`] listens to them
//! (see [`Ran`]). Without the feature it is bellperson's CPU prover.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bellperson::groth16::{self, Proof};
use bellperson::{Circuit, Variable};
use blstrs::{Bls12, Scalar};
use ff::Field;
use rand::SeedableRng;
use serde::Serialize;

use gpud_prover::circuits::CircuitSpec;
use gpud_prover::cs::{CsResult, Lc, Record};
use gpud_prover::error::Result;
use gpud_prover::params::ProvingKey;

/// Whether this build has bellperson's CUDA prover (the `bellperson-gpu` feature).
pub const GPU_BUILD: bool = cfg!(feature = "bellperson-gpu");

/// Where bellperson's proofs ran, by its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ran {
    /// Every proof started bellperson's GPU FFT kernel and both GPU MSM kernels (G1, G2) and
    /// none fell back to the CPU.
    Gpu,
    /// No GPU kernel started: bellperson's CPU prover (a build without the feature, no GPU
    /// found, or `BELLMAN_NO_GPU`).
    Cpu,
    /// bellperson tried the GPU and no kernel started (its warnings say why): the CPU prover.
    CpuFallback,
    /// Some stages ran on the GPU and some on the CPU (a kernel failed or could not start), or
    /// proofs differed.
    GpuPartly,
    /// bellperson's log could not be heard (another `log` logger was installed first).
    Unknown,
}

impl Ran {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gpu => "GPU",
            Self::Cpu => "CPU",
            Self::CpuFallback => "CPU (its GPU kernels did not start)",
            Self::GpuPartly => "GPU partly (fell back to the CPU)",
            Self::Unknown => "unknown",
        }
    }
}

/// The baseline's numbers for one circuit size.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineRun {
    /// `bellperson`.
    pub engine: String,
    /// Built with bellperson's CUDA prover.
    pub gpu_build: bool,
    /// Where the proofs ran.
    pub ran: Ran,
    /// GPU kernel starts over all proofs (FFT + G1 MSM + G2 MSM; 3 per proof on the GPU).
    pub gpu_kernels: usize,
    /// bellperson's "falling back to the CPU" and "cannot instantiate" warnings.
    pub fallbacks: usize,
    /// Timed proofs (after the warm-up).
    pub reps: usize,
    /// `create_proof`, synthesis included (as our engines' totals are), median seconds.
    pub total: f64,
    /// Every proof verified.
    pub verified: bool,
    /// The first proof (witness 0, the `r`, `s` of our engines' first proofs) equals the
    /// reference, bit for bit (None: no reference given).
    pub same_proof: Option<bool>,
}

/// Proves `spec` with bellperson's `create_proof` on `key`'s parameters: `warmup` untimed
/// proofs, then `reps` timed ones, the witness of proof `i` drawn from seed `i` as in
/// [`crate::proofs::engines`]. The first proof uses `first_rs` and is compared with
/// `reference` (our engines' first proof, same witness and `r`, `s`); the rest use `r`, `s`
/// from a seeded generator. Every proof is verified.
pub fn bellperson(
    spec: &CircuitSpec,
    key: &ProvingKey,
    first_rs: (Scalar, Scalar),
    reference: Option<&Proof<Bls12>>,
    warmup: usize,
    reps: usize,
) -> Result<BaselineRun> {
    let watch = LogWatch::install();
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(u64::from(spec.log_size()) ^ 0xbe11);
    let mut times = Vec::new();
    let (mut verified, mut same_proof) = (true, None);
    let (mut ran, mut gpu_kernels, mut fallbacks) = (None::<Ran>, 0, 0);
    for rep in 0..warmup.max(1) + reps {
        let (r, s) = if rep == 0 {
            first_rs
        } else {
            (Scalar::random(&mut rng), Scalar::random(&mut rng))
        };
        let before = watch.map(LogWatch::counts);
        let t = Instant::now();
        let proof = groth16::create_proof(spec.with_witness(rep as u64), key.params(), r, s)?;
        let secs = t.elapsed().as_secs_f64();
        let this = match (watch, before) {
            (Some(w), Some(b)) => {
                let d = w.counts().since(&b);
                gpu_kernels += d.fft + d.msm;
                fallbacks += d.fallbacks;
                d.ran()
            }
            _ => Ran::Unknown,
        };
        ran = Some(match (ran, this) {
            (None, t) => t,
            (Some(Ran::Unknown), _) | (_, Ran::Unknown) => Ran::Unknown,
            (Some(r), t) if r == t => r,
            _ => Ran::GpuPartly,
        });
        verified &= key.verify(&proof, &public_inputs(spec, rep as u64)?)?;
        if rep == 0 {
            same_proof = reference.map(|p| *p == proof);
        }
        if rep >= warmup.max(1) {
            times.push(secs);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(BaselineRun {
        engine: "bellperson".to_owned(),
        gpu_build: GPU_BUILD,
        ran: ran.unwrap_or(Ran::Unknown),
        gpu_kernels,
        fallbacks,
        reps,
        total: times.get(times.len() / 2).copied().unwrap_or(0.0),
        verified,
        same_proof,
    })
}

/// The GPUs bellperson's CUDA prover sees (rust-gpu-tools' list: name, compute units,
/// memory); empty in a build without the feature.
pub fn gpu_devices() -> Vec<String> {
    #[cfg(feature = "bellperson-gpu")]
    {
        ec_gpu_gen::rust_gpu_tools::Device::all()
            .into_iter()
            .map(|d| {
                format!(
                    "{} ({} compute units, {:.1} GiB)",
                    d.name(),
                    d.compute_units(),
                    d.memory() as f64 / (1u64 << 30) as f64
                )
            })
            .collect()
    }
    #[cfg(not(feature = "bellperson-gpu"))]
    Vec::new()
}

/// The public inputs of `spec`'s circuit with witness `seed`, for verifying bellperson's
/// proofs (untimed): the circuit run on a constraint system that keeps only its inputs.
fn public_inputs(spec: &CircuitSpec, seed: u64) -> Result<Vec<Scalar>> {
    let mut cs = InputsOnly(Vec::new());
    spec.with_witness(seed).synthesize(&mut cs)?;
    Ok(cs.0)
}

/// A constraint system that evaluates every variable (gadgets compute their values inside
/// `alloc`) and records only the public inputs; constraints are dropped unbuilt.
struct InputsOnly(Vec<Scalar>);

gpud_prover::constraint_system!(InputsOnly);

impl Record for InputsOnly {
    fn aux(&mut self, f: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        f()?;
        Ok(Variable::new_unchecked(bellperson::Index::Aux(0)))
    }

    fn input(&mut self, f: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        self.0.push(f()?);
        Ok(Variable::new_unchecked(bellperson::Index::Input(
            self.0.len(),
        )))
    }

    fn constraint(
        &mut self,
        _: impl FnOnce(Lc) -> Lc,
        _: impl FnOnce(Lc) -> Lc,
        _: impl FnOnce(Lc) -> Lc,
    ) {
    }
}

/// What bellperson's log said, counted since the watch was installed.
struct LogWatch {
    provers: AtomicUsize,
    fft: AtomicUsize,
    msm: AtomicUsize,
    fallbacks: AtomicUsize,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    provers: usize,
    fft: usize,
    msm: usize,
    fallbacks: usize,
}

impl Counts {
    fn since(&self, b: &Counts) -> Counts {
        Counts {
            provers: self.provers - b.provers,
            fft: self.fft - b.fft,
            msm: self.msm - b.msm,
            fallbacks: self.fallbacks - b.fallbacks,
        }
    }

    /// One proof's counts: bellperson 0.27 starts one FFT kernel and two MSM kernels (G1,
    /// then G2) per proof, and announces every proof.
    fn ran(&self) -> Ran {
        match (self.provers, self.fft, self.msm, self.fallbacks) {
            (0, ..) => Ran::Unknown,
            (_, 0, 0, 0) => Ran::Cpu,
            (_, 0, 0, _) => Ran::CpuFallback,
            (_, f, m, 0) if f >= 1 && m >= 2 => Ran::Gpu,
            _ => Ran::GpuPartly,
        }
    }
}

static WATCH: LogWatch = LogWatch {
    provers: AtomicUsize::new(0),
    fft: AtomicUsize::new(0),
    msm: AtomicUsize::new(0),
    fallbacks: AtomicUsize::new(0),
};

impl LogWatch {
    /// Installs the watch as the process's `log` logger once; None when another logger was
    /// there first.
    fn install() -> Option<&'static LogWatch> {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        let ok = *INSTALLED.get_or_init(|| {
            let ok = log::set_logger(&WATCH).is_ok();
            if ok {
                log::set_max_level(log::LevelFilter::Info);
            }
            ok
        });
        ok.then_some(&WATCH)
    }

    fn counts(&self) -> Counts {
        Counts {
            provers: self.provers.load(Ordering::SeqCst),
            fft: self.fft.load(Ordering::SeqCst),
            msm: self.msm.load(Ordering::SeqCst),
            fallbacks: self.fallbacks.load(Ordering::SeqCst),
        }
    }
}

impl log::Log for LogWatch {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("bellperson") && m.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        // bellperson 0.27's messages (src/groth16/prover/native.rs, src/gpu/locks.rs).
        let text = record.args().to_string();
        let counter = if text.contains("is being used!") {
            Some(&self.provers)
        } else if text.contains("GPU FFT kernel instantiated") {
            Some(&self.fft)
        } else if text.contains("GPU Multiexp kernel instantiated") {
            Some(&self.msm)
        } else if text.contains("Falling back to CPU") || text.contains("Cannot instantiate GPU") {
            Some(&self.fallbacks)
        } else {
            None
        };
        if let Some(c) = counter {
            c.fetch_add(1, Ordering::SeqCst);
        }
        if record.level() <= log::Level::Warn {
            eprintln!("bellperson: {}: {text}", record.level());
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(provers: usize, fft: usize, msm: usize, fallbacks: usize) -> Counts {
        Counts {
            provers,
            fft,
            msm,
            fallbacks,
        }
    }

    #[test]
    fn a_proof_is_on_the_gpu_only_with_every_kernel_and_no_fallback() {
        assert_eq!(counts(1, 1, 2, 0).ran(), Ran::Gpu);
        assert_eq!(counts(1, 0, 0, 0).ran(), Ran::Cpu);
        assert_eq!(counts(1, 1, 1, 0).ran(), Ran::GpuPartly);
        assert_eq!(counts(1, 0, 2, 0).ran(), Ran::GpuPartly);
        assert_eq!(counts(1, 1, 2, 1).ran(), Ran::GpuPartly);
        assert_eq!(counts(1, 0, 0, 2).ran(), Ran::CpuFallback);
        assert_eq!(counts(0, 0, 0, 0).ran(), Ran::Unknown);
        assert_eq!(counts(0, 1, 2, 0).ran(), Ran::Unknown);
    }
}
