//! A synthetic circuit of exactly `2^k` constraints with a realistic mix of witness values.

use bellperson::{Circuit, ConstraintSystem, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Witness, value};

/// Constraints per step of the chain.
const STEP: usize = 7;
/// Constraints outside the steps: the output binding and the two public-input constraints the
/// prover adds (the constant one and the output).
const FIXED: usize = 3;

/// Per step: two bits with booleanity checks, their product (zero three times in four), a
/// small counter packing the bits, a squaring and a multiplication of random field elements,
/// and a bit-controlled select feeding the next step. The chain's end is the public input;
/// booleanity checks on fresh bits fill the domain to exactly `2^k` constraints.
#[derive(Debug, Clone)]
pub struct Synthetic {
    log_size: u32,
    witness: Option<Witness>,
}

impl Synthetic {
    /// The circuit for a domain of `2^log_size` (at least 2^4).
    pub fn new(log_size: u32, witness: Option<Witness>) -> Self {
        Self { log_size, witness }
    }

    fn counts(&self) -> (usize, usize) {
        let body = (1usize << self.log_size) - FIXED;
        (body / STEP, body % STEP)
    }
}

fn alloc_bit<CS: ConstraintSystem<Scalar>>(
    cs: &mut CS,
    bit: Option<bool>,
) -> Result<(Variable, Option<Scalar>), SynthesisError> {
    let v = bit.map(|b| if b { Scalar::ONE } else { Scalar::ZERO });
    let var = cs.alloc(|| "bit", || value(v))?;
    cs.enforce(
        || "boolean",
        |lc| lc + var,
        |lc| lc + CS::one() - var,
        |lc| lc,
    );
    Ok((var, v))
}

impl Circuit<Scalar> for Synthetic {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let (steps, padding) = self.counts();
        let mut rng = self.witness.map(|w| ChaCha8Rng::seed_from_u64(w.seed));
        let tamper = self.witness.is_some_and(|w| w.tamper);

        let mut x_val = rng.as_mut().map(Scalar::random);
        let mut x = cs.alloc(|| "x0", || value(x_val))?;
        // The counter starts as the empty combination (zero) and is a variable after step 0.
        let mut s: Option<Variable> = None;
        let mut s_val = Some(Scalar::ZERO).filter(|_| rng.is_some());

        for step in 0..steps {
            let (bi_bit, bj_bit) = match rng.as_mut() {
                Some(r) => (Some(r.r#gen::<bool>()), Some(r.r#gen::<bool>())),
                None => (None, None),
            };
            let (bi, bi_val) = alloc_bit(cs, bi_bit)?;
            let (bj, bj_val) = alloc_bit(cs, bj_bit)?;

            let z_val = bi_val.zip(bj_val).map(|(a, b)| a * b);
            let z = cs.alloc(|| "z", || value(z_val))?;
            cs.enforce(|| "bi*bj", |lc| lc + bi, |lc| lc + bj, |lc| lc + z);

            let new_s_val = s_val
                .zip(bi_val.zip(bj_val))
                .map(|(s, (a, b))| s + a + b.double());
            let new_s = cs.alloc(|| "s", || value(new_s_val))?;
            cs.enforce(
                || "pack",
                |lc| {
                    let lc = lc + bi + (Scalar::from(2u64), bj);
                    match s {
                        Some(s) => lc + s,
                        None => lc,
                    }
                },
                |lc| lc + CS::one(),
                |lc| lc + new_s,
            );
            s = Some(new_s);
            s_val = new_s_val;

            let t_val = x_val.map(|x| x.square());
            let t = cs.alloc(|| "t", || value(t_val))?;
            cs.enforce(|| "x^2", |lc| lc + x, |lc| lc + x, |lc| lc + t);

            let u_val = t_val.zip(s_val).map(|(t, s)| t * (s + Scalar::ONE));
            let u = cs.alloc(|| "u", || value(u_val))?;
            cs.enforce(
                || "t*(s+1)",
                |lc| lc + t,
                |lc| lc + new_s + CS::one(),
                |lc| lc + u,
            );

            // y = bi ? x : u, as (x − u)·bi = y − u.
            let mut y_val = x_val
                .zip(u_val)
                .zip(bi_val)
                .map(|((x, u), b)| if b == Scalar::ONE { x } else { u });
            if tamper && step == 0 {
                y_val = y_val.map(|y| y + Scalar::ONE);
            }
            let y = cs.alloc(|| "y", || value(y_val))?;
            cs.enforce(|| "select", |lc| lc + x - u, |lc| lc + bi, |lc| lc + y - u);
            x = y;
            x_val = y_val;
        }

        for _ in 0..padding {
            let bit = rng.as_mut().map(|r| r.r#gen::<bool>());
            alloc_bit(cs, bit)?;
        }

        let out = cs.alloc_input(|| "out", || value(x_val))?;
        cs.enforce(
            || "bind out",
            |lc| lc + x,
            |lc| lc + CS::one(),
            |lc| lc + out,
        );
        Ok(())
    }
}
