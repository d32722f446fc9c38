//! A PoRep-partition-shaped circuit of exactly `2^k` constraints, made of independent
//! per-challenge segments (see [`crate::segmented`]).
//!
//! Like a PoRep partition, it proves many challenges, each opening a leaf (its label bits and a
//! column value bound to the replica id) and checking inclusion paths to a commitment; the
//! hashing is done on 32-bit words in bits, so the witness is almost all 0/1 with small packed
//! words, and B is sparse. The "hash" of one path level is not a standardized function: it is
//! a conditional swap by the path's direction bit, an XOR, an AND and an XOR of the two words'
//! bits, the constraint kinds of SHA-256 and of bit-decomposed Merkle paths.
//!
//! Per level (W = 32): W sibling bits with booleanity `(1 − s)·s = 0`, the direction bit's
//! booleanity, W swaps `(s − x)·d = l − x`, W XORs `(2r)·l = r + l − c`, W ANDs
//! `c_i·c_{i+1} = n_i`, W XORs `(2n)·c = n + c − x'` and one packing `(Σ 2^i x'_i)·1 = p`:
//! 5W + 2 = 162 constraints, every B a single variable or the constant one. A challenge has a
//! leaf opening (W + 2 constraints), [`PATHS`] paths of `levels` levels and one binding of its
//! commitment (the paths' last packed words, combined) to its public input. One more input,
//! the replica id, is shared. The rest of the domain is filled by a padding segment of
//! booleanity checks.

use bellperson::{ConstraintSystem, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::{Witness, value};
use crate::segmented::{SegmentShape, Segmented, synthesize_in_order};

/// Bits per word.
const W: usize = 32;
/// Inclusion paths per challenge (a PoRep challenge opens the data, column and replica trees).
pub const PATHS: usize = 3;
/// Constraints of one path level.
const LEVEL: usize = 5 * W + 2;
/// Aux variables of one path level: sibling bits, direction bit, l, c, n, x' bits, the pack.
const LEVEL_AUX: usize = 5 * W + 2;
/// Leaf opening: W label bits (booleanity), the packed label, the column value.
const LEAF: usize = W + 2;
/// Most levels per path (a 2^30-leaf tree, a 32 GiB sector's).
const MAX_LEVELS: usize = 30;
/// Rotations of the level's mixing (bit i meets bit i + ROT of the other word).
const ROT_XOR: u32 = 7;
const ROT_OUT: u32 = 3;

/// See the module docs.
#[derive(Debug, Clone)]
pub struct Porep {
    log_size: u32,
    levels: usize,
    challenges: usize,
    padding: usize,
    witness: Option<Witness>,
}

/// The words of one level: the inputs x (current node), s (sibling), d and the results.
#[derive(Debug, Clone, Copy)]
struct LevelWords {
    s: u32,
    d: bool,
    l: u32,
    c: u32,
    n: u32,
    out: u32,
}

fn level_words(x: u32, s: u32, d: bool, tamper: bool) -> LevelWords {
    let (mut l, r) = if d { (s, x) } else { (x, s) };
    if tamper {
        l ^= 1;
    }
    let c = l ^ r.rotate_right(ROT_XOR);
    let n = c & c.rotate_right(1);
    let out = n ^ c.rotate_right(ROT_OUT);
    LevelWords { s, d, l, c, n, out }
}

fn bit(w: Option<u32>, i: usize) -> Option<Scalar> {
    w.map(|w| Scalar::from(u64::from((w >> i) & 1)))
}

impl Porep {
    /// The circuit for a domain of `2^log_size` (at least 2^8).
    pub fn new(log_size: u32, witness: Option<Witness>) -> Self {
        let total = 1usize << log_size;
        // Paths grow with the size up to a 2^30-leaf tree, so small sizes still have several
        // challenges (segments).
        let levels = ((total >> 10) / PATHS).clamp(1, MAX_LEVELS);
        let per = Self::challenge_constraints(levels);
        // Two shared input constraints (the one, the replica id), and per challenge its
        // segment and its input's constraint.
        let challenges = ((total - 2) / (per + 1)).max(1);
        let padding = total - 2 - challenges * (per + 1);
        Self {
            log_size,
            levels,
            challenges,
            padding,
            witness,
        }
    }

    fn challenge_constraints(levels: usize) -> usize {
        LEAF + PATHS * levels * LEVEL + 1
    }

    /// Challenges (segments besides the padding).
    pub fn challenges(&self) -> usize {
        self.challenges
    }

    /// Levels of each inclusion path.
    pub fn levels(&self) -> usize {
        self.levels
    }

    /// log2 of the domain.
    pub fn log_size(&self) -> u32 {
        self.log_size
    }

    fn replica_id(&self) -> Option<u64> {
        self.witness
            .map(|w| w.seed.wrapping_mul(0x9e37_79b9) & 0xffff_ffff)
    }

    /// Challenge `i`'s witness: the leaf and, per path and level, the sibling and direction.
    fn draw(&self, i: usize) -> Option<(u32, Vec<(u32, bool)>)> {
        self.witness.map(|w| {
            let mut rng = ChaCha8Rng::seed_from_u64(w.seed);
            rng.set_stream(i as u64);
            let leaf = rng.r#gen::<u32>();
            let steps = (0..PATHS * self.levels)
                .map(|_| (rng.r#gen::<u32>(), rng.r#gen::<bool>()))
                .collect();
            (leaf, steps)
        })
    }

    /// Challenge `i`'s leaf and level words (with the tamper applied to challenge 0).
    fn words(&self, i: usize) -> Option<(u32, Vec<LevelWords>)> {
        let tamper = self.witness.is_some_and(|w| w.tamper) && i == 0;
        self.draw(i).map(|(leaf, steps)| {
            let mut out = Vec::with_capacity(steps.len());
            for p in 0..PATHS {
                let mut x = leaf;
                for (j, &(s, d)) in steps[p * self.levels..(p + 1) * self.levels]
                    .iter()
                    .enumerate()
                {
                    let w = level_words(x, s, d, tamper && p == 0 && j == 0);
                    x = w.out;
                    out.push(w);
                }
            }
            (leaf, out)
        })
    }

    /// The commitment of a challenge: its paths' last words, packed into one element.
    fn commitment(&self, words: &[LevelWords]) -> Scalar {
        let mut acc = Scalar::ZERO;
        let mut scale = Scalar::ONE;
        for p in 0..PATHS {
            acc += Scalar::from(u64::from(words[(p + 1) * self.levels - 1].out)) * scale;
            scale *= Scalar::from(1u64 << W);
        }
        acc
    }
}

fn alloc_word_bits<CS: ConstraintSystem<Scalar>>(
    cs: &mut CS,
    w: Option<u32>,
) -> Result<Vec<Variable>, SynthesisError> {
    (0..W)
        .map(|i| cs.alloc(|| "bit", || value(bit(w, i))))
        .collect()
}

fn booleanity<CS: ConstraintSystem<Scalar>>(cs: &mut CS, v: Variable) {
    cs.enforce(|| "boolean", |lc| lc + CS::one() - v, |lc| lc + v, |lc| lc);
}

fn pack(bits: &[Variable]) -> LinearCombination<Scalar> {
    let mut lc = LinearCombination::zero();
    let mut coeff = Scalar::ONE;
    for &b in bits {
        lc = lc + (coeff, b);
        coeff = coeff.double();
    }
    lc
}

impl Segmented for Porep {
    fn alloc_inputs<CS: ConstraintSystem<Scalar>>(
        &self,
        cs: &mut CS,
    ) -> Result<Vec<Variable>, SynthesisError> {
        let replica = self.replica_id();
        let mut vars = vec![cs.alloc_input(|| "replica id", || value(replica.map(Scalar::from)))?];
        // The commitments need every challenge's words: computed on all cores.
        let comms: Option<Vec<Scalar>> = self.witness.map(|_| {
            (0..self.challenges)
                .into_par_iter()
                .map(|i| {
                    self.words(i)
                        .map_or(Scalar::ZERO, |(_, w)| self.commitment(&w))
                })
                .collect()
        });
        for i in 0..self.challenges {
            let v = comms.as_ref().map(|c| c[i]);
            vars.push(cs.alloc_input(|| "commitment", || value(v))?);
        }
        Ok(vars)
    }

    fn num_segments(&self) -> usize {
        self.challenges + 1
    }

    fn segment_shape(&self, i: usize) -> SegmentShape {
        if i < self.challenges {
            SegmentShape {
                aux: LEAF + PATHS * self.levels * LEVEL_AUX,
                constraints: Self::challenge_constraints(self.levels),
            }
        } else {
            SegmentShape {
                aux: self.padding,
                constraints: self.padding,
            }
        }
    }

    fn synthesize_segment<CS: ConstraintSystem<Scalar>>(
        &self,
        i: usize,
        cs: &mut CS,
        inputs: &[Variable],
    ) -> Result<(), SynthesisError> {
        if i >= self.challenges {
            let mut rng = self.witness.map(|w| {
                let mut r = ChaCha8Rng::seed_from_u64(w.seed);
                r.set_stream(u64::MAX);
                r
            });
            for _ in 0..self.padding {
                let b = rng
                    .as_mut()
                    .map(|r| Scalar::from(u64::from(r.r#gen::<bool>())));
                let v = cs.alloc(|| "pad", || value(b))?;
                booleanity(cs, v);
            }
            return Ok(());
        }
        let words = self.words(i);
        let leaf = words.as_ref().map(|(l, _)| *l);
        let level = |j: usize| words.as_ref().map(|(_, w)| w[j]);

        // Leaf opening: the label's bits, its packed value, the column value bound to the id.
        let label = alloc_word_bits(cs, leaf)?;
        for &b in &label {
            booleanity(cs, b);
        }
        let packed = cs.alloc(
            || "label",
            || value(leaf.map(|l| Scalar::from(u64::from(l)))),
        )?;
        cs.enforce(
            || "pack label",
            |_| pack(&label),
            |lc| lc + CS::one(),
            |lc| lc + packed,
        );
        let column_val = leaf
            .zip(self.replica_id())
            .map(|(l, r)| Scalar::from(u64::from(l)) + Scalar::from(r));
        let column = cs.alloc(|| "column", || value(column_val))?;
        cs.enforce(
            || "column",
            |lc| lc + packed + inputs[0],
            |lc| lc + CS::one(),
            |lc| lc + column,
        );

        let mut roots = Vec::with_capacity(PATHS);
        for p in 0..PATHS {
            let mut x = label.clone();
            let mut last = None;
            for j in p * self.levels..(p + 1) * self.levels {
                let w = level(j);
                let s = alloc_word_bits(cs, w.map(|w| w.s))?;
                for &b in &s {
                    booleanity(cs, b);
                }
                let d_val = w.map(|w| Scalar::from(u64::from(w.d)));
                let d = cs.alloc(|| "direction", || value(d_val))?;
                booleanity(cs, d);
                // l = d ? s : x, r = s + x − l.
                let l = alloc_word_bits(cs, w.map(|w| w.l))?;
                for k in 0..W {
                    cs.enforce(
                        || "swap",
                        |lc| lc + s[k] - x[k],
                        |lc| lc + d,
                        |lc| lc + l[k] - x[k],
                    );
                }
                let r = |k: usize| (s[k], x[k], l[k]);
                let c = alloc_word_bits(cs, w.map(|w| w.c))?;
                for k in 0..W {
                    let (rs, rx, rl) = r((k + ROT_XOR as usize) % W);
                    // c = l XOR r as (2r)·l = r + l − c.
                    cs.enforce(
                        || "xor",
                        |lc| {
                            lc + (Scalar::from(2u64), rs) + (Scalar::from(2u64), rx)
                                - (Scalar::from(2u64), rl)
                        },
                        |lc| lc + l[k],
                        |lc| lc + rs + rx - rl + l[k] - c[k],
                    );
                }
                let n = alloc_word_bits(cs, w.map(|w| w.n))?;
                for k in 0..W {
                    cs.enforce(
                        || "and",
                        |lc| lc + c[k],
                        |lc| lc + c[(k + 1) % W],
                        |lc| lc + n[k],
                    );
                }
                let out = alloc_word_bits(cs, w.map(|w| w.out))?;
                for k in 0..W {
                    let ck = c[(k + ROT_OUT as usize) % W];
                    cs.enforce(
                        || "xor out",
                        |lc| lc + (Scalar::from(2u64), n[k]),
                        |lc| lc + ck,
                        |lc| lc + n[k] + ck - out[k],
                    );
                }
                let p_val = w.map(|w| Scalar::from(u64::from(w.out)));
                let packed = cs.alloc(|| "node", || value(p_val))?;
                cs.enforce(
                    || "pack node",
                    |_| pack(&out),
                    |lc| lc + CS::one(),
                    |lc| lc + packed,
                );
                x = out;
                last = Some(packed);
            }
            roots.push(last.ok_or(SynthesisError::Unsatisfiable)?);
        }
        // The commitment: the paths' last packed words, 2^32 apart.
        cs.enforce(
            || "commitment",
            |_| {
                let mut lc = LinearCombination::zero();
                let mut scale = Scalar::ONE;
                for &r in &roots {
                    lc = lc + (scale, r);
                    scale *= Scalar::from(1u64 << W);
                }
                lc
            },
            |lc| lc + CS::one(),
            |lc| lc + inputs[1 + i],
        );
        Ok(())
    }
}

impl bellperson::Circuit<Scalar> for Porep {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        synthesize_in_order(&self, cs)
    }
}
