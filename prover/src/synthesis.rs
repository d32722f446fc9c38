//! Witness synthesis: a [`ConstraintSystem`] that records what the prover needs.
//!
//! Running a circuit against [`ProvingAssignment`] yields the evaluations of the A, B and C
//! linear combinations at every constraint, the input and aux assignments, and the densities
//! that say which variables appear in the A and B queries. This mirrors what bellperson's own
//! (private) prover records, so the proving key bellperson generates fits our assignment.

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, Variable};
use blstrs::Scalar;
use ff::Field;

use crate::cs::{CsResult, Lc, Record};
use crate::error::{ProverError, Result};

/// Which variables of one kind appear (with a non-zero coefficient) in one query.
///
/// The generator leaves out of the A and B queries every variable that never appears there,
/// so the prover must skip the same variables when it pairs scalars with bases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Density {
    words: Vec<u64>,
    len: usize,
    count: usize,
}

impl Density {
    /// A tracker for no variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker in which all `len` variables are present.
    pub fn full(len: usize) -> Self {
        let mut d = Self::new();
        for i in 0..len {
            d.push(false);
            d.set(i);
        }
        d
    }

    /// Appends one variable, present or not.
    pub fn push(&mut self, present: bool) {
        if self.len % 64 == 0 {
            self.words.push(0);
        }
        self.len += 1;
        if present {
            self.set(self.len - 1);
        }
    }

    /// A tracker for `len` variables, none present.
    pub fn absent(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)],
            len,
            count: 0,
        }
    }

    /// Appends `other`'s variables after this tracker's (joining segments' trackers).
    pub fn append(&mut self, other: &Density) {
        let shift = self.len % 64;
        if shift == 0 {
            self.words.extend_from_slice(&other.words);
        } else {
            // Each of other's words straddles this tracker's last word and a new one.
            for &w in &other.words {
                let last = self.words.len() - 1;
                self.words[last] |= w << shift;
                self.words.push(w >> (64 - shift));
            }
        }
        self.len += other.len;
        self.words.truncate(self.len.div_ceil(64));
        self.count += other.count;
    }

    /// Marks present every variable present in `other` (a tracker of the same variables).
    pub fn union(&mut self, other: &Density) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
        self.count = self.words.iter().map(|w| w.count_ones() as usize).sum();
    }

    /// Marks variable `i` present. Panics-free for `i < len`; ignored otherwise.
    pub(crate) fn set(&mut self, i: usize) {
        if i >= self.len {
            return;
        }
        let (w, b) = (i / 64, i % 64);
        if self.words[w] & (1 << b) == 0 {
            self.words[w] |= 1 << b;
            self.count += 1;
        }
    }

    /// Whether variable `i` is present.
    pub fn get(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Number of variables tracked.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no variables are tracked.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of variables present (the number of bases the query holds for this kind).
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes of heap memory this tracker holds (its words' capacity).
    pub fn heap_bytes(&self) -> u64 {
        (self.words.capacity() * std::mem::size_of::<u64>()) as u64
    }

    /// The scalars of the present variables, in order: what an MSM over the query's bases needs.
    pub fn select(&self, scalars: &[Scalar]) -> Vec<Scalar> {
        let mut out = Vec::with_capacity(self.count);
        self.select_into(scalars, &mut out);
        out
    }

    /// Appends to `out` the scalars of the present variables among `scalars`, in order, on all
    /// cores: a large partition's queries are gigabytes, which one thread writes (and faults
    /// in) far slower than the GPU consumes them.
    pub fn select_into(&self, scalars: &[Scalar], out: &mut Vec<Scalar>) {
        use rayon::prelude::*;
        // Variables per block of the parallel copy: 1024 words.
        const BLOCK_WORDS: usize = 1024;
        let n = self.len.min(scalars.len());
        let words = n.div_ceil(64);
        // Word `w`'s bits for variables below `n` only.
        let word = |w: usize| {
            let bits = self.words[w];
            let valid = n - w * 64;
            if valid >= 64 {
                bits
            } else {
                bits & ((1u64 << valid) - 1)
            }
        };
        let blocks = words.div_ceil(BLOCK_WORDS);
        let counts: Vec<usize> = (0..blocks)
            .into_par_iter()
            .map(|b| {
                (b * BLOCK_WORDS..words.min((b + 1) * BLOCK_WORDS))
                    .map(|w| word(w).count_ones() as usize)
                    .sum()
            })
            .collect();
        let start = out.len();
        out.par_extend(rayon::iter::repeat_n(Scalar::ZERO, counts.iter().sum()));
        let mut rest = &mut out[start..];
        let mut pieces = Vec::with_capacity(blocks);
        for &c in &counts {
            let (piece, tail) = rest.split_at_mut(c);
            pieces.push(piece);
            rest = tail;
        }
        pieces.into_par_iter().enumerate().for_each(|(b, piece)| {
            let mut k = 0;
            for w in b * BLOCK_WORDS..words.min((b + 1) * BLOCK_WORDS) {
                let mut bits = word(w);
                while bits != 0 {
                    piece[k] = scalars[w * 64 + bits.trailing_zeros() as usize];
                    k += 1;
                    bits &= bits - 1;
                }
            }
        });
    }
}

/// Options for [`synthesize`].
#[derive(Debug, Clone, Copy)]
pub struct SynthesisOptions {
    /// Synthesize a segmented circuit (see [`crate::segmented`]) on all cores; `false` runs
    /// every circuit on the calling thread (the reference the parallel result must equal).
    pub parallel: bool,
    /// Check `a · b = c` at every constraint, so that a wrong witness fails here with the index
    /// of the constraint instead of producing a proof that does not verify. Costs one field
    /// multiplication per constraint.
    pub check_constraints: bool,
    /// Store the C evaluations (default). An engine that makes them from A and B itself
    /// ([`crate::engine::Engine::needs_c`] false: the CUDA engine, which multiplies on the
    /// device) needs none, and the pipeline turns this off for it: 32 bytes less per
    /// constraint, 4 GiB of a 2^27 partition's assignment. C is still evaluated, so a bad
    /// combination is still named and the check above still runs.
    pub keep_c: bool,
}

impl Default for SynthesisOptions {
    fn default() -> Self {
        Self {
            parallel: true,
            check_constraints: true,
            keep_c: true,
        }
    }
}

/// The recorded result of running a circuit with its witness.
#[derive(Debug)]
pub struct ProvingAssignment {
    /// Evaluation of each constraint's A combination.
    pub a: Vec<Scalar>,
    /// Evaluation of each constraint's B combination.
    pub b: Vec<Scalar>,
    /// Evaluation of each constraint's C combination; empty when the options did not keep it
    /// ([`SynthesisOptions::keep_c`]).
    pub c: Vec<Scalar>,
    /// Public inputs; `input[0]` is the constant one.
    pub input: Vec<Scalar>,
    /// Private (auxiliary) variables.
    pub aux: Vec<Scalar>,
    /// Aux variables present in the A query (inputs are all present: see [`synthesize`]).
    pub a_aux_density: Density,
    /// Inputs present in the B query.
    pub b_input_density: Density,
    /// Aux variables present in the B query.
    pub b_aux_density: Density,
    check: bool,
    keep_c: bool,
    error: Option<ProverError>,
}

impl ProvingAssignment {
    /// An assignment from parts a segmented synthesis recorded (see [`crate::segmented`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        opts: SynthesisOptions,
        [a, b, c]: [Vec<Scalar>; 3],
        input: Vec<Scalar>,
        aux: Vec<Scalar>,
        [a_aux_density, b_input_density, b_aux_density]: [Density; 3],
    ) -> Self {
        Self {
            a,
            b,
            c,
            input,
            aux,
            a_aux_density,
            b_input_density,
            b_aux_density,
            check: opts.check_constraints,
            keep_c: opts.keep_c,
            error: None,
        }
    }

    pub(crate) fn empty(opts: SynthesisOptions) -> Self {
        Self {
            a: Vec::new(),
            b: Vec::new(),
            c: Vec::new(),
            input: Vec::new(),
            aux: Vec::new(),
            a_aux_density: Density::new(),
            b_input_density: Density::new(),
            b_aux_density: Density::new(),
            check: opts.check_constraints,
            keep_c: opts.keep_c,
            error: None,
        }
    }

    /// Bytes of heap memory the assignment holds: what [`crate::host::estimate`]'s synthesis
    /// figure predicts.
    pub fn heap_bytes(&self) -> u64 {
        let fr = std::mem::size_of::<Scalar>();
        let scalars = self.a.capacity()
            + self.b.capacity()
            + self.c.capacity()
            + self.input.capacity()
            + self.aux.capacity();
        (scalars * fr) as u64
            + self.a_aux_density.heap_bytes()
            + self.b_input_density.heap_bytes()
            + self.b_aux_density.heap_bytes()
    }

    /// Number of constraints, including one per public input.
    pub fn num_constraints(&self) -> usize {
        self.a.len()
    }

    /// The public inputs as a verifier takes them (without the leading one).
    pub fn public_inputs(&self) -> &[Scalar] {
        &self.input[1..]
    }

    /// Evaluates `lc`, marking the variables it uses in the given trackers.
    fn eval(
        &mut self,
        lc: &LinearCombination<Scalar>,
        query: Query,
    ) -> std::result::Result<Scalar, ProverError> {
        let constraint = self.a.len();
        let b_input = &mut self.b_input_density;
        let inputs = eval_inputs(lc, &self.input, constraint, |index| {
            if query == Query::B {
                b_input.set(index);
            }
        })?;
        let aux = &self.aux;
        let (a_aux, b_aux) = (&mut self.a_aux_density, &mut self.b_aux_density);
        let auxes = eval_terms(
            lc.iter_aux(),
            |index| {
                let value = *aux.get(index).ok_or(ProverError::UnknownVariable {
                    constraint,
                    kind: "aux",
                    index,
                    allocated: aux.len(),
                })?;
                Ok((index, value))
            },
            |index| match query {
                Query::A => a_aux.set(index),
                Query::B => b_aux.set(index),
                Query::C => {}
            },
        )?;
        Ok(inputs + auxes)
    }

    fn record(
        &mut self,
        a: &LinearCombination<Scalar>,
        b: &LinearCombination<Scalar>,
        c: &LinearCombination<Scalar>,
    ) -> Result<()> {
        let index = self.a.len();
        let a = self.eval(a, Query::A)?;
        let b = self.eval(b, Query::B)?;
        let c = self.eval(c, Query::C)?;
        if self.check && a * b != c {
            return Err(ProverError::Unsatisfied { index });
        }
        self.a.push(a);
        self.b.push(b);
        if self.keep_c {
            self.c.push(c);
        }
        Ok(())
    }
}

/// The sum of `coeff · value` over `terms`, for the proving assignment and the segments:
/// `value` looks a variable up (its index in the caller's storage and its value, or the error
/// naming it) and `used` marks that index in the caller's query trackers. A zero coefficient
/// leaves the variable out of the query (the generator's point for it would be the identity,
/// which it filters away).
pub(crate) fn eval_terms<'a>(
    terms: impl Iterator<Item = (&'a usize, &'a Scalar)>,
    mut value: impl FnMut(usize) -> Result<(usize, Scalar)>,
    mut used: impl FnMut(usize),
) -> Result<Scalar> {
    let mut acc = Scalar::ZERO;
    for (&index, coeff) in terms {
        if bool::from(coeff.is_zero()) {
            continue;
        }
        let (at, value) = value(index)?;
        acc += if *coeff == Scalar::ONE {
            value
        } else {
            value * coeff
        };
        used(at);
    }
    Ok(acc)
}

/// The input terms of `lc` (constraint `constraint`) summed over `input` with
/// [`eval_terms`], `used` marking each input.
pub(crate) fn eval_inputs(
    lc: &LinearCombination<Scalar>,
    input: &[Scalar],
    constraint: usize,
    used: impl FnMut(usize),
) -> Result<Scalar> {
    eval_terms(
        lc.iter_inputs(),
        |index| {
            let value = *input.get(index).ok_or(ProverError::UnknownVariable {
                constraint,
                kind: "input",
                index,
                allocated: input.len(),
            })?;
            Ok((index, value))
        },
        used,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Query {
    A,
    B,
    C,
}

crate::constraint_system!(ProvingAssignment);

impl Record for ProvingAssignment {
    fn aux(&mut self, f: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        self.aux.push(f()?);
        self.a_aux_density.push(false);
        self.b_aux_density.push(false);
        Ok(Variable::new_unchecked(Index::Aux(self.aux.len() - 1)))
    }

    fn input(&mut self, f: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        self.input.push(f()?);
        self.b_input_density.push(false);
        Ok(Variable::new_unchecked(Index::Input(self.input.len() - 1)))
    }

    fn constraint(
        &mut self,
        a: impl FnOnce(Lc) -> Lc,
        b: impl FnOnce(Lc) -> Lc,
        c: impl FnOnce(Lc) -> Lc,
    ) {
        // `enforce` cannot fail in the trait, so the first error is kept and reported when
        // synthesis ends; later constraints are not recorded.
        if self.error.is_some() {
            return;
        }
        let a = a(LinearCombination::zero());
        let b = b(LinearCombination::zero());
        let c = c(LinearCombination::zero());
        if let Err(e) = self.record(&a, &b, &c) {
            self.error = Some(e);
        }
    }
}

/// Runs `circuit` with its witness and records the proving assignment.
///
/// Like bellperson: input 0 is the constant one, allocated before the circuit runs, and after
/// it one constraint `input_i · 0 = 0` is added per input, which puts every input in the A
/// query (so the A-input MSM is dense) and makes the inputs linearly independent.
pub fn synthesize<C: Circuit<Scalar>>(
    circuit: C,
    opts: SynthesisOptions,
) -> Result<ProvingAssignment> {
    let mut cs = ProvingAssignment::empty(opts);
    cs.alloc_input(|| "one", || Ok(Scalar::ONE))?;
    circuit.synthesize(&mut cs)?;
    if let Some(e) = cs.error.take() {
        return Err(e);
    }
    for i in 0..cs.input.len() {
        cs.enforce(
            || "input",
            |lc| lc + Variable::new_unchecked(Index::Input(i)),
            |lc| lc,
            |lc| lc,
        );
    }
    if let Some(e) = cs.error.take() {
        return Err(e);
    }
    Ok(cs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bellperson::SynthesisError;
    use proptest::prelude::*;

    proptest! {
        /// The parallel selection equals the obvious filter, for trackers longer or shorter
        /// than the scalars and lengths across the parallel blocks' edges.
        #[test]
        fn selecting_in_parallel_equals_filtering(
            len in 0usize..140_000,
            short_by in 0usize..200,
            seed in any::<u64>(),
            one_in in 1u64..5,
        ) {
            let mut d = Density::new();
            let mut x = seed | 1;
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                d.push(x % one_in == 0);
            }
            let scalars: Vec<Scalar> =
                (0..len.saturating_sub(short_by) as u64).map(Scalar::from).collect();
            let want: Vec<Scalar> = scalars
                .iter()
                .enumerate()
                .filter(|(i, _)| d.get(*i))
                .map(|(_, s)| *s)
                .collect();
            let mut got = vec![Scalar::ONE];
            d.select_into(&scalars, &mut got);
            prop_assert_eq!(got[0], Scalar::ONE);
            prop_assert_eq!(&got[1..], &want[..]);
        }
    }

    struct Square {
        x: Option<u64>,
        claimed: Option<u64>,
    }

    impl Circuit<Scalar> for Square {
        fn synthesize<CS: ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> std::result::Result<(), SynthesisError> {
            let x = cs.alloc(
                || "x",
                || {
                    self.x
                        .map(Scalar::from)
                        .ok_or(SynthesisError::AssignmentMissing)
                },
            )?;
            let y = cs.alloc_input(
                || "y",
                || {
                    self.claimed
                        .map(Scalar::from)
                        .ok_or(SynthesisError::AssignmentMissing)
                },
            )?;
            cs.enforce(|| "x*x=y", |lc| lc + x, |lc| lc + x, |lc| lc + y);
            Ok(())
        }
    }

    #[test]
    fn records_evaluations_inputs_and_densities() {
        let cs = synthesize(
            Square {
                x: Some(3),
                claimed: Some(9),
            },
            Default::default(),
        )
        .unwrap();
        // One circuit constraint plus one per input (the one and y).
        assert_eq!(cs.num_constraints(), 3);
        assert_eq!(cs.a, vec![Scalar::from(3), Scalar::ONE, Scalar::from(9)]);
        assert_eq!(cs.b, vec![Scalar::from(3), Scalar::ZERO, Scalar::ZERO]);
        assert_eq!(cs.c, vec![Scalar::from(9), Scalar::ZERO, Scalar::ZERO]);
        assert_eq!(cs.input, vec![Scalar::ONE, Scalar::from(9)]);
        assert_eq!(cs.public_inputs(), &[Scalar::from(9)]);
        assert_eq!(cs.a_aux_density.count(), 1);
        assert_eq!(cs.b_aux_density.count(), 1);
        assert_eq!(cs.b_input_density.count(), 0);
        assert_eq!(cs.b_input_density.len(), 2);
    }

    #[test]
    fn wrong_witness_is_rejected_with_the_constraint_index() {
        let err = synthesize(
            Square {
                x: Some(3),
                claimed: Some(10),
            },
            Default::default(),
        )
        .unwrap_err();
        assert!(
            matches!(err, ProverError::Unsatisfied { index: 0 }),
            "{err}"
        );
        // Without the check, synthesis records the (unsatisfying) evaluations.
        let cs = synthesize(
            Square {
                x: Some(3),
                claimed: Some(10),
            },
            SynthesisOptions {
                check_constraints: false,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(cs.c[0], Scalar::from(10));
    }

    #[test]
    fn missing_witness_is_a_synthesis_error() {
        let err = synthesize(
            Square {
                x: None,
                claimed: Some(9),
            },
            Default::default(),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            ProverError::Synthesis(SynthesisError::AssignmentMissing)
        ));
    }

    struct Forged;

    impl Circuit<Scalar> for Forged {
        fn synthesize<CS: ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> std::result::Result<(), SynthesisError> {
            let ghost = Variable::new_unchecked(Index::Aux(7));
            cs.enforce(|| "ghost", |lc| lc + ghost, |lc| lc, |lc| lc);
            Ok(())
        }
    }

    #[test]
    fn unknown_variable_is_an_error_not_a_panic() {
        let err = synthesize(Forged, Default::default()).unwrap_err();
        assert!(
            matches!(
                err,
                ProverError::UnknownVariable {
                    kind: "aux",
                    index: 7,
                    allocated: 0,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn density_select_and_full() {
        let mut d = Density::new();
        for i in 0..130 {
            d.push(i % 3 == 0);
        }
        assert_eq!(d.count(), 44);
        let s: Vec<Scalar> = (0..130u64).map(Scalar::from).collect();
        let picked = d.select(&s);
        assert_eq!(picked.len(), 44);
        assert_eq!(picked[1], Scalar::from(3));
        assert_eq!(Density::full(70).count(), 70);
    }
}
