//! A chain of Poseidon-style permutations on bellperson's `AllocatedNum`.
//!
//! Width 3, S-box `x⁵`, 8 full rounds and 57 partial rounds (the round counts of Poseidon over
//! BLS12-381 at width 3), a Cauchy MDS matrix and round constants drawn from a fixed seed. The
//! constants are not those of a standardized instance: the circuit has the shape and witness
//! of a real Poseidon hash chain, which is what a prover benchmark needs.

use std::sync::OnceLock;

use bellperson::gadgets::num::AllocatedNum;
use bellperson::{Circuit, ConstraintSystem, LinearCombination, SynthesisError};
use blstrs::Scalar;
use ff::Field;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{Witness, value};

const WIDTH: usize = 3;
const FULL_ROUNDS: usize = 8;
const PARTIAL_ROUNDS: usize = 57;
/// Three constraints per S-box (x², x⁴, x⁵).
pub(crate) const CONSTRAINTS_PER_LINK: usize = 3 * (FULL_ROUNDS * WIDTH + PARTIAL_ROUNDS);
/// Output binding plus the two public-input constraints.
const FIXED: usize = 3;

struct Constants {
    rounds: Vec<[Scalar; WIDTH]>,
    mds: [[Scalar; WIDTH]; WIDTH],
}

fn constants() -> &'static Constants {
    static C: OnceLock<Constants> = OnceLock::new();
    C.get_or_init(|| {
        let mut rng = ChaCha8Rng::seed_from_u64(0x706f_7365_6964_6f6e); // "poseidon"
        let rounds = (0..FULL_ROUNDS + PARTIAL_ROUNDS)
            .map(|_| [(); WIDTH].map(|_| Scalar::random(&mut rng)))
            .collect();
        // Cauchy matrix 1/(x_i + y_j) with distinct x_i = i, y_j = WIDTH + j: invertible (MDS).
        let mds = std::array::from_fn(|i| {
            std::array::from_fn(|j| {
                Scalar::from((i + WIDTH + j) as u64)
                    .invert()
                    .unwrap_or(Scalar::ONE)
            })
        });
        Constants { rounds, mds }
    })
}

/// A state element: a linear combination of variables and its value (when witnessed).
#[derive(Clone)]
struct Elem {
    lc: LinearCombination<Scalar>,
    val: Option<Scalar>,
}

fn sbox<CS: ConstraintSystem<Scalar>>(cs: &mut CS, e: &Elem) -> Result<Elem, SynthesisError> {
    let x2 = AllocatedNum::alloc(cs.namespace(|| "x2"), || value(e.val.map(|v| v.square())))?;
    cs.enforce(
        || "x*x",
        |lc| lc + &e.lc,
        |lc| lc + &e.lc,
        |lc| lc + x2.get_variable(),
    );
    let x4 = x2.square(cs.namespace(|| "x4"))?;
    let x5_val = x4.get_value().zip(e.val).map(|(a, b)| a * b);
    let x5 = AllocatedNum::alloc(cs.namespace(|| "x5"), || value(x5_val))?;
    cs.enforce(
        || "x4*x",
        |lc| lc + x4.get_variable(),
        |lc| lc + &e.lc,
        |lc| lc + x5.get_variable(),
    );
    Ok(Elem {
        lc: LinearCombination::zero() + x5.get_variable(),
        val: x5_val,
    })
}

fn permute<CS: ConstraintSystem<Scalar>>(
    cs: &mut CS,
    mut state: [Elem; WIDTH],
) -> Result<[Elem; WIDTH], SynthesisError> {
    let c = constants();
    let half = FULL_ROUNDS / 2;
    for (r, rc) in c.rounds.iter().enumerate() {
        for (e, k) in state.iter_mut().zip(rc) {
            e.lc = e.lc.clone() + (*k, CS::one());
            e.val = e.val.map(|v| v + k);
        }
        let full = r < half || r >= half + PARTIAL_ROUNDS;
        for (i, e) in state.iter_mut().enumerate() {
            if full || i == 0 {
                *e = sbox(&mut cs.namespace(|| format!("round {r} sbox {i}")), e)?;
            }
        }
        // Linear layer: free in R1CS, folded into the next constraints' combinations.
        state = std::array::from_fn(|i| {
            let mut lc = LinearCombination::zero();
            let mut val = Some(Scalar::ZERO);
            for (j, e) in state.iter().enumerate() {
                lc = lc + (c.mds[i][j], &e.lc);
                val = val.zip(e.val).map(|(acc, v)| acc + c.mds[i][j] * v);
            }
            Elem { lc, val }
        });
    }
    Ok(state)
}

/// `x_{i+1} = P(0, x_i, i)[1]` for as many links as fit the domain; `x_n` is public.
#[derive(Debug, Clone)]
pub struct PoseidonChain {
    links: usize,
    witness: Option<Witness>,
}

impl PoseidonChain {
    /// As many links as fit a domain of `2^log_size` constraints (at least one).
    pub fn fitting(log_size: u32, witness: Option<Witness>) -> Self {
        let links = ((1usize << log_size).saturating_sub(FIXED) / CONSTRAINTS_PER_LINK).max(1);
        Self { links, witness }
    }

    /// Number of permutations.
    pub fn links(&self) -> usize {
        self.links
    }
}

impl Circuit<Scalar> for PoseidonChain {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let x0_val = self
            .witness
            .map(|w| Scalar::random(ChaCha8Rng::seed_from_u64(w.seed)));
        let x0 = AllocatedNum::alloc(cs.namespace(|| "x0"), || value(x0_val))?;
        let mut x = Elem {
            lc: LinearCombination::zero() + x0.get_variable(),
            val: x0_val,
        };
        for link in 0..self.links {
            let tag = Scalar::from(link as u64);
            let state = [
                Elem {
                    lc: LinearCombination::zero(),
                    val: x.val.map(|_| Scalar::ZERO),
                },
                x,
                Elem {
                    lc: LinearCombination::zero() + (tag, CS::one()),
                    val: x0_val.map(|_| tag),
                },
            ];
            let [_, out, _] = permute(&mut cs.namespace(|| format!("link {link}")), state)?;
            x = out;
        }
        // Bind the output to a variable, then to the public input. A wrong witness claims an
        // output one larger than the chain computes.
        let tamper = self.witness.is_some_and(|w| w.tamper);
        let claimed = x.val.map(|v| if tamper { v + Scalar::ONE } else { v });
        let out = cs.alloc_input(|| "out", || value(claimed))?;
        cs.enforce(
            || "bind out",
            |lc| lc + &x.lc,
            |lc| lc + CS::one(),
            |lc| lc + out,
        );
        Ok(())
    }
}
