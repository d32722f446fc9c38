//! Benchmark and test circuits with a size knob: `log_size = k` means the circuit fills (or,
//! for hash chains, fits into) an evaluation domain of `2^k` points.
//!
//! - `synthetic`: exactly `2^k` constraints with a witness shaped like real circuits': bits
//!   and booleanity checks, bit products (mostly zero), small packed counters, and random field
//!   elements from a squaring chain with conditional selects.
//! - `poseidon`: a chain of Poseidon-style permutations (width 3, x⁵ S-box, 8 full and 57
//!   partial rounds, constants from a seeded generator: not a standardized instance), 243
//!   constraints per link, built on bellperson's `AllocatedNum`.
//! - `sha256`: a SHA-256 hash chain from bellperson's SHA-256 gadget (one compression per
//!   link, about 26 000 constraints), so it needs `k ≥ 15`.
//! - `porep`: exactly `2^k` constraints shaped like a PoRep partition: independent
//!   per-challenge segments (leaf openings, bit-decomposed inclusion paths), a 0/1 and
//!   small-value witness, sparse B; segmented, so it is synthesized on all cores.

mod porep;
mod poseidon;
mod sha256;
mod synthetic;

pub use porep::Porep;
pub use poseidon::PoseidonChain;
pub use sha256::Sha256Chain;
pub use synthetic::Synthetic;

use std::fmt;

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;

use crate::error::{ProverError, Result};

/// The circuits this crate can build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CircuitKind {
    /// Mixed-witness synthetic circuit (see the module docs).
    Synthetic,
    /// Poseidon-style permutation chain.
    Poseidon,
    /// SHA-256 hash chain from bellperson gadgets.
    Sha256,
    /// PoRep-partition-shaped segmented circuit.
    Porep,
}

impl CircuitKind {
    /// Every kind, in the order `--help` lists them.
    pub const ALL: [CircuitKind; 4] = [Self::Synthetic, Self::Poseidon, Self::Sha256, Self::Porep];

    /// The name used on the command line and in cache keys.
    pub fn name(self) -> &'static str {
        match self {
            Self::Synthetic => "synthetic",
            Self::Poseidon => "poseidon",
            Self::Sha256 => "sha256",
            Self::Porep => "porep",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| ProverError::UnknownCircuit {
                name: name.to_owned(),
                known: Self::ALL.map(Self::name).join(", "),
            })
    }

    /// Supported `log_size` range.
    pub fn size_range(self) -> (u32, u32) {
        match self {
            Self::Synthetic => (4, 24),
            Self::Poseidon => (8, 24),
            Self::Sha256 => (15, 24),
            // One challenge (three one-level paths) needs 2^10; 2^27 is a real partition's size.
            Self::Porep => (10, 27),
        }
    }
}

impl fmt::Display for CircuitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A circuit kind at a size: what parameters are generated and cached for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CircuitSpec {
    kind: CircuitKind,
    log_size: u32,
}

impl CircuitSpec {
    /// Checks the size against the kind's range.
    pub fn new(kind: CircuitKind, log_size: u32) -> Result<Self> {
        let (min, max) = kind.size_range();
        if !(min..=max).contains(&log_size) {
            return Err(ProverError::SizeOutOfRange {
                circuit: kind.name().to_owned(),
                log_size,
                min,
                max,
            });
        }
        Ok(Self { kind, log_size })
    }

    /// Parses a name and checks the size.
    pub fn parse(name: &str, log_size: u32) -> Result<Self> {
        Self::new(CircuitKind::from_name(name)?, log_size)
    }

    /// The kind.
    pub fn kind(&self) -> CircuitKind {
        self.kind
    }

    /// log2 of the domain the circuit fits.
    pub fn log_size(&self) -> u32 {
        self.log_size
    }

    /// The circuit without a witness, for parameter generation.
    pub fn shape(&self) -> AnyCircuit {
        self.build(None)
    }

    /// The circuit with the witness drawn from `seed`.
    pub fn with_witness(&self, seed: u64) -> AnyCircuit {
        self.build(Some(Witness {
            seed,
            tamper: false,
        }))
    }

    /// The circuit with a witness that violates one constraint (for negative tests).
    pub fn with_wrong_witness(&self, seed: u64) -> AnyCircuit {
        self.build(Some(Witness { seed, tamper: true }))
    }

    fn build(&self, witness: Option<Witness>) -> AnyCircuit {
        match self.kind {
            CircuitKind::Synthetic => AnyCircuit::Synthetic(Synthetic::new(self.log_size, witness)),
            CircuitKind::Poseidon => {
                AnyCircuit::Poseidon(PoseidonChain::fitting(self.log_size, witness))
            }
            CircuitKind::Sha256 => AnyCircuit::Sha256(Sha256Chain::fitting(self.log_size, witness)),
            CircuitKind::Porep => AnyCircuit::Porep(Porep::new(self.log_size, witness)),
        }
    }
}

impl fmt::Display for CircuitSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@2^{}", self.kind, self.log_size)
    }
}

/// Where a circuit's witness comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Witness {
    /// Seed of the witness generator.
    pub seed: u64,
    /// Corrupt one value so that one constraint fails.
    pub tamper: bool,
}

/// Any of this crate's circuits, as one type (the prover and generator are generic).
#[derive(Debug, Clone)]
pub enum AnyCircuit {
    /// See [`Synthetic`].
    Synthetic(Synthetic),
    /// See [`PoseidonChain`].
    Poseidon(PoseidonChain),
    /// See [`Sha256Chain`].
    Sha256(Sha256Chain),
    /// See [`Porep`].
    Porep(Porep),
}

impl Circuit<Scalar> for AnyCircuit {
    fn synthesize<CS: ConstraintSystem<Scalar>>(
        self,
        cs: &mut CS,
    ) -> std::result::Result<(), SynthesisError> {
        match self {
            Self::Synthetic(c) => c.synthesize(cs),
            Self::Poseidon(c) => c.synthesize(cs),
            Self::Sha256(c) => c.synthesize(cs),
            Self::Porep(c) => c.synthesize(cs),
        }
    }
}

/// A value the witness would hold, or `AssignmentMissing` when there is no witness.
pub(crate) fn value<T>(v: Option<T>) -> std::result::Result<T, SynthesisError> {
    v.ok_or(SynthesisError::AssignmentMissing)
}

pub(crate) mod counting {
    //! A constraint system that only counts, for sizing circuits.
    use crate::cs::{CsResult, Lc, Record};
    use bellperson::{Index, Variable};
    use blstrs::Scalar;

    #[derive(Default)]
    pub struct Counter {
        pub inputs: usize,
        pub aux: usize,
        pub constraints: usize,
    }

    crate::constraint_system!(Counter);

    impl Record for Counter {
        fn aux(&mut self, _: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
            self.aux += 1;
            Ok(Variable::new_unchecked(Index::Aux(self.aux - 1)))
        }
        fn input(&mut self, _: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
            self.inputs += 1;
            Ok(Variable::new_unchecked(Index::Input(self.inputs)))
        }
        fn constraint(
            &mut self,
            _: impl FnOnce(Lc) -> Lc,
            _: impl FnOnce(Lc) -> Lc,
            _: impl FnOnce(Lc) -> Lc,
        ) {
            self.constraints += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthesis::{SynthesisOptions, synthesize};

    #[test]
    fn names_and_ranges() {
        for k in CircuitKind::ALL {
            assert_eq!(CircuitKind::from_name(k.name()).unwrap(), k);
        }
        assert!(matches!(
            CircuitKind::from_name("md5"),
            Err(ProverError::UnknownCircuit { .. })
        ));
        assert!(matches!(
            CircuitSpec::parse("sha256", 12),
            Err(ProverError::SizeOutOfRange { min: 15, .. })
        ));
        assert!(CircuitSpec::parse("synthetic", 30).is_err());
    }

    #[test]
    fn every_circuit_fits_its_domain_and_is_satisfied() {
        for (kind, k) in [
            (CircuitKind::Synthetic, 6),
            (CircuitKind::Synthetic, 9),
            (CircuitKind::Poseidon, 8),
            (CircuitKind::Poseidon, 11),
            (CircuitKind::Porep, 10),
            (CircuitKind::Porep, 12),
        ] {
            let spec = CircuitSpec::new(kind, k).unwrap();
            let cs = synthesize(spec.with_witness(3), SynthesisOptions::default())
                .unwrap_or_else(|e| panic!("{spec}: {e}"));
            let n = cs.num_constraints();
            assert!(n <= 1 << k, "{spec}: {n} constraints");
            assert!(
                n > 1 << (k - 1),
                "{spec}: {n} constraints leave the domain half empty"
            );
            if matches!(kind, CircuitKind::Synthetic | CircuitKind::Porep) {
                assert_eq!(n, 1 << k);
            }
            let err = synthesize(spec.with_wrong_witness(3), SynthesisOptions::default());
            assert!(
                matches!(err, Err(ProverError::Unsatisfied { .. })),
                "{spec}"
            );
        }
    }
}
