//! A SHA-256 hash chain built from bellperson's SHA-256 gadget.

use std::sync::OnceLock;

use bellperson::gadgets::boolean::{AllocatedBit, Boolean};
use bellperson::gadgets::sha256::sha256;
use bellperson::{Circuit, ConstraintSystem, LinearCombination, SynthesisError};
use blstrs::Scalar;
use ff::{Field, PrimeField};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::counting::Counter;
use super::{Witness, value};

/// `d_{i+1} = SHA-256(d_i)` over 256-bit digests from a random preimage `d_0`; the last digest
/// is packed into public inputs. One SHA-256 compression per link.
#[derive(Debug, Clone)]
pub struct Sha256Chain {
    links: usize,
    witness: Option<Witness>,
}

/// (constraints per link, constraints outside the links including the input constraints).
fn cost() -> (usize, usize) {
    static COST: OnceLock<(usize, usize)> = OnceLock::new();
    *COST.get_or_init(|| {
        let count = |links| {
            let mut cs = Counter::default();
            // Shape-only synthesis of our own circuit cannot fail.
            let _ = Sha256Chain {
                links,
                witness: None,
            }
            .synthesize(&mut cs);
            // The prover adds one constraint per input, including the constant one.
            cs.constraints + cs.inputs + 1
        };
        let (one, two) = (count(1), count(2));
        (two - one, 2 * one - two)
    })
}

impl Sha256Chain {
    /// As many links as fit a domain of `2^log_size` constraints (at least one).
    pub fn fitting(log_size: u32, witness: Option<Witness>) -> Self {
        let (per_link, fixed) = cost();
        let links = ((1usize << log_size).saturating_sub(fixed) / per_link).max(1);
        Self { links, witness }
    }

    /// Number of SHA-256 compressions.
    pub fn links(&self) -> usize {
        self.links
    }
}

impl Circuit<Scalar> for Sha256Chain {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let mut rng = self.witness.map(|w| ChaCha8Rng::seed_from_u64(w.seed));
        let mut bits = Vec::with_capacity(256);
        for i in 0..256 {
            let b = rng.as_mut().map(|r| r.r#gen::<bool>());
            let bit = AllocatedBit::alloc(cs.namespace(|| format!("preimage {i}")), b)?;
            bits.push(Boolean::from(bit));
        }
        for link in 0..self.links {
            bits = sha256(cs.namespace(|| format!("link {link}")), &bits)?;
        }
        // Pack the digest into field elements (as bellperson's multipack does), binding each to
        // a public input. A wrong witness claims a first input one larger than the digest.
        let tamper = self.witness.is_some_and(|w| w.tamper);
        for (j, chunk) in bits.chunks(Scalar::CAPACITY as usize).enumerate() {
            let mut lc = LinearCombination::zero();
            let mut packed = Some(Scalar::ZERO);
            let mut coeff = Scalar::ONE;
            for bit in chunk {
                lc = lc + &bit.lc(CS::one(), coeff);
                packed = packed
                    .zip(bit.get_value())
                    .map(|(acc, b)| if b { acc + coeff } else { acc });
                coeff = coeff.double();
            }
            if tamper && j == 0 {
                packed = packed.map(|v| v + Scalar::ONE);
            }
            let input = cs.alloc_input(|| format!("digest {j}"), || value(packed))?;
            cs.enforce(
                || format!("pack {j}"),
                |l| l + &lc,
                |l| l + CS::one(),
                |l| l + input,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthesis::{SynthesisOptions, synthesize};

    #[test]
    fn one_link_fits_2_15() {
        let (per_link, fixed) = cost();
        assert!((20_000..30_000).contains(&per_link), "{per_link}");
        assert!(per_link + fixed <= 1 << 15);
        let chain = Sha256Chain::fitting(
            15,
            Some(Witness {
                seed: 1,
                tamper: false,
            }),
        );
        assert_eq!(chain.links(), 1);
        let cs = synthesize(chain, SynthesisOptions::default()).unwrap();
        assert_eq!(cs.num_constraints(), per_link + fixed);
        assert_eq!(cs.public_inputs().len(), 2);
        let bad = Sha256Chain::fitting(
            15,
            Some(Witness {
                seed: 1,
                tamper: true,
            }),
        );
        assert!(synthesize(bad, SynthesisOptions::default()).is_err());
    }
}
