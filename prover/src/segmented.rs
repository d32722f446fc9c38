//! Segmented synthesis: a circuit made of independent segments, synthesized on all cores.
//!
//! A [`Segmented`] circuit allocates its public inputs first, then runs segments that each
//! declare beforehand how many aux variables and constraints they allocate ([`SegmentShape`]).
//! So every segment's variable and constraint offsets are known before any runs, each segment
//! writes its evaluations and assignments straight into its own slice of the final vectors
//! (no copy), and only the densities (bit sets, 1/256 of the scalars) are joined afterwards.
//! The result is the [`ProvingAssignment`] that sequential synthesis records, value for value
//! and in the same order: [`synthesize_in_order`] is the sequential reference, and the
//! circuit's [`bellperson::Circuit`] impl must be exactly that.
//!
//! A segment may use the public inputs and its own aux variables only; naming another
//! segment's variable is an [`ProverError::UnknownVariable`] here (sequentially it would pass,
//! so the segments would not be independent).

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

use crate::circuits::AnyCircuit;
use crate::cs::{CsResult, Lc, Record};
use crate::error::{ProverError, Result};
use crate::synthesis::{self, Density, ProvingAssignment, SynthesisOptions};

/// What one segment allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentShape {
    /// Aux variables.
    pub aux: usize,
    /// Constraints.
    pub constraints: usize,
}

/// A circuit made of independent segments after a prelude that allocates the public inputs.
pub trait Segmented: Sync {
    /// Allocates the public inputs (and nothing else), returning their variables in order.
    fn alloc_inputs<CS: ConstraintSystem<Scalar>>(
        &self,
        cs: &mut CS,
    ) -> std::result::Result<Vec<Variable>, SynthesisError>;

    /// Number of segments.
    fn num_segments(&self) -> usize;

    /// What segment `i` allocates (it must allocate exactly that).
    fn segment_shape(&self, i: usize) -> SegmentShape;

    /// Runs segment `i`; it may use `inputs` and the aux variables it allocates itself.
    fn synthesize_segment<CS: ConstraintSystem<Scalar>>(
        &self,
        i: usize,
        cs: &mut CS,
        inputs: &[Variable],
    ) -> std::result::Result<(), SynthesisError>;
}

/// The sequential synthesis of a segmented circuit: the prelude, then every segment in order.
/// A segmented circuit's `Circuit::synthesize` is this.
pub fn synthesize_in_order<S: Segmented + ?Sized, CS: ConstraintSystem<Scalar>>(
    circuit: &S,
    cs: &mut CS,
) -> std::result::Result<(), SynthesisError> {
    let inputs = circuit.alloc_inputs(cs)?;
    for i in 0..circuit.num_segments() {
        circuit.synthesize_segment(i, cs, &inputs)?;
    }
    Ok(())
}

/// A circuit the prover can synthesize: sequentially unless it is segmented and
/// [`SynthesisOptions::parallel`] is set. `prove::synthesize` goes through this.
pub trait Synthesize: Circuit<Scalar> + Sized {
    /// Records the proving assignment.
    fn synthesize_assignment(self, opts: SynthesisOptions) -> Result<ProvingAssignment> {
        synthesis::synthesize(self, opts)
    }
}

impl Synthesize for AnyCircuit {
    fn synthesize_assignment(self, opts: SynthesisOptions) -> Result<ProvingAssignment> {
        match self {
            AnyCircuit::Porep(c) if opts.parallel => synthesize_segmented(&c, opts),
            other => synthesis::synthesize(other, opts),
        }
    }
}

/// A vector of `n` zeros, written on all cores (first touch of the pages included).
pub(crate) fn zeroed(n: usize) -> Vec<Scalar> {
    let mut v = Vec::with_capacity(n);
    v.par_extend((0..n).into_par_iter().map(|_| Scalar::ZERO));
    v
}

/// Synthesizes `circuit`'s segments in parallel; equal to [`synthesis::synthesize`] of its
/// sequential form (the same evaluations, assignments and densities, the same first error).
pub fn synthesize_segmented<S: Segmented + ?Sized>(
    circuit: &S,
    opts: SynthesisOptions,
) -> Result<ProvingAssignment> {
    let mut pre = ProvingAssignment::empty(opts);
    pre.alloc_input(|| "one", || Ok(Scalar::ONE))?;
    let inputs = circuit.alloc_inputs(&mut pre)?;
    if !pre.aux.is_empty() || pre.num_constraints() != 0 {
        return Err(ProverError::BadSegment {
            segment: usize::MAX,
            reason: "prelude allocated aux variables or constraints".into(),
        });
    }
    let input = std::mem::take(&mut pre.input);
    let num_inputs = input.len();
    let shapes: Vec<SegmentShape> = (0..circuit.num_segments())
        .map(|i| circuit.segment_shape(i))
        .collect();
    let total_aux: usize = shapes.iter().map(|s| s.aux).sum();
    let body: usize = shapes.iter().map(|s| s.constraints).sum();
    let total = body + num_inputs;
    // C only when kept (each segment then gets an empty slice of it).
    let (mut a, mut b, mut c, mut aux) = (
        zeroed(total),
        zeroed(total),
        if opts.keep_c {
            zeroed(total)
        } else {
            Vec::new()
        },
        zeroed(total_aux),
    );

    let mut parts = Vec::with_capacity(shapes.len());
    {
        let (mut ra, mut rb, mut rc, mut rx) = (&mut a[..], &mut b[..], &mut c[..], &mut aux[..]);
        let (mut aux_offset, mut con_offset) = (0, 0);
        for (segment, shape) in shapes.iter().enumerate() {
            let (sa, ta) = std::mem::take(&mut ra).split_at_mut(shape.constraints);
            let (sb, tb) = std::mem::take(&mut rb).split_at_mut(shape.constraints);
            let (sc, tc) = std::mem::take(&mut rc).split_at_mut(rc_len(opts, shape));
            let (sx, tx) = std::mem::take(&mut rx).split_at_mut(shape.aux);
            (ra, rb, rc, rx) = (ta, tb, tc, tx);
            parts.push(SegmentCs {
                segment,
                input: &input,
                aux: sx,
                aux_offset,
                aux_len: 0,
                abc: [sa, sb, sc],
                con_offset,
                con_len: 0,
                a_aux: Density::absent(shape.aux),
                b_aux: Density::absent(shape.aux),
                b_input: Density::absent(num_inputs),
                check: opts.check_constraints,
                error: None,
                overrun: false,
            });
            aux_offset += shape.aux;
            con_offset += shape.constraints;
        }
    }
    let done: Vec<Done> = parts
        .into_par_iter()
        .map(|mut cs| {
            let result = circuit.synthesize_segment(cs.segment, &mut cs, &inputs);
            cs.finish(result)
        })
        .collect();

    // Sequentially a circuit's own error ends synthesis before a recorded one is looked at.
    let mut recorded = None;
    let mut a_aux = Density::new();
    let mut b_aux = Density::new();
    let mut b_input = Density::absent(num_inputs);
    for d in done {
        match d.error {
            Some(Failure::Circuit(e)) => return Err(e.into()),
            Some(Failure::Recorded(e)) => {
                recorded.get_or_insert(e);
            }
            None => {}
        }
        a_aux.append(&d.a_aux);
        b_aux.append(&d.b_aux);
        b_input.union(&d.b_input);
    }
    if let Some(e) = recorded {
        return Err(e);
    }
    // The input constraints `input_i · 0 = 0` that sequential synthesis appends.
    a[body..].copy_from_slice(&input);
    Ok(ProvingAssignment::from_parts(
        opts,
        [a, b, c],
        input,
        aux,
        [a_aux, b_input, b_aux],
    ))
}

/// A segment's share of the C evaluations: its constraints, or none when C is not kept.
fn rc_len(opts: SynthesisOptions, shape: &SegmentShape) -> usize {
    if opts.keep_c { shape.constraints } else { 0 }
}

enum Failure {
    /// The circuit's own synthesis error.
    Circuit(SynthesisError),
    /// An error the constraint system recorded (unsatisfied, unknown variable, bad shape).
    Recorded(ProverError),
}

struct Done {
    error: Option<Failure>,
    a_aux: Density,
    b_aux: Density,
    b_input: Density,
}

/// One segment's constraint system: writes into its slices of the final vectors.
struct SegmentCs<'a> {
    segment: usize,
    input: &'a [Scalar],
    aux: &'a mut [Scalar],
    aux_offset: usize,
    aux_len: usize,
    abc: [&'a mut [Scalar]; 3],
    con_offset: usize,
    con_len: usize,
    a_aux: Density,
    b_aux: Density,
    b_input: Density,
    check: bool,
    error: Option<ProverError>,
    /// The segment went past its declared shape (its circuit then sees an error).
    overrun: bool,
}

impl SegmentCs<'_> {
    fn finish(self, result: std::result::Result<(), SynthesisError>) -> Done {
        let error = match result {
            Err(_) if self.overrun => self.error.map(Failure::Recorded),
            Err(e) => Some(Failure::Circuit(e)),
            Ok(()) => self.error.map(Failure::Recorded).or_else(|| {
                (self.aux_len != self.aux.len() || self.con_len != self.abc[0].len()).then(|| {
                    Failure::Recorded(ProverError::BadSegment {
                        segment: self.segment,
                        reason: format!(
                            "declared {} aux variables and {} constraints but allocated {} and {}",
                            self.aux.len(),
                            self.abc[0].len(),
                            self.aux_len,
                            self.con_len
                        ),
                    })
                })
            }),
        };
        Done {
            error,
            a_aux: self.a_aux,
            b_aux: self.b_aux,
            b_input: self.b_input,
        }
    }

    fn overran(&mut self, what: &str) -> SynthesisError {
        self.overrun = true;
        if self.error.is_none() {
            self.error = Some(ProverError::BadSegment {
                segment: self.segment,
                reason: what.to_owned(),
            });
        }
        SynthesisError::Unsatisfiable
    }

    fn eval(
        &mut self,
        lc: &LinearCombination<Scalar>,
        which: usize,
    ) -> std::result::Result<Scalar, ProverError> {
        let constraint = self.con_offset + self.con_len;
        let b_input = &mut self.b_input;
        let inputs = synthesis::eval_inputs(lc, self.input, constraint, |index| {
            if which == 1 {
                b_input.set(index);
            }
        })?;
        let (aux, aux_offset, aux_len) = (&self.aux, self.aux_offset, self.aux_len);
        let (a_aux, b_aux) = (&mut self.a_aux, &mut self.b_aux);
        let auxes = synthesis::eval_terms(
            lc.iter_aux(),
            |index| {
                let local = index
                    .checked_sub(aux_offset)
                    .filter(|&l| l < aux_len)
                    .ok_or(ProverError::UnknownVariable {
                        constraint,
                        kind: "aux",
                        index,
                        allocated: aux_offset + aux_len,
                    })?;
                Ok((local, aux[local]))
            },
            |local| match which {
                0 => a_aux.set(local),
                1 => b_aux.set(local),
                _ => {}
            },
        )?;
        Ok(inputs + auxes)
    }
}

crate::constraint_system!(SegmentCs<'_>);

impl Record for SegmentCs<'_> {
    fn aux(&mut self, f: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        let v = f()?;
        if self.aux_len == self.aux.len() {
            return Err(self.overran("allocates more aux variables than it declared"));
        }
        self.aux[self.aux_len] = v;
        self.aux_len += 1;
        Ok(Variable::new_unchecked(Index::Aux(
            self.aux_offset + self.aux_len - 1,
        )))
    }

    fn input(&mut self, _: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        Err(self.overran(
            "allocates a public input (inputs belong to the prelude, before the segments)",
        ))
    }

    fn constraint(
        &mut self,
        a: impl FnOnce(Lc) -> Lc,
        b: impl FnOnce(Lc) -> Lc,
        c: impl FnOnce(Lc) -> Lc,
    ) {
        if self.error.is_some() {
            return;
        }
        if self.con_len == self.abc[0].len() {
            self.overran("enforces more constraints than it declared");
            return;
        }
        let index = self.con_offset + self.con_len;
        let lcs = [
            a(LinearCombination::zero()),
            b(LinearCombination::zero()),
            c(LinearCombination::zero()),
        ];
        let mut v = [Scalar::ZERO; 3];
        for (which, lc) in lcs.iter().enumerate() {
            match self.eval(lc, which) {
                Ok(x) => v[which] = x,
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            }
        }
        if self.check && v[0] * v[1] != v[2] {
            self.error = Some(ProverError::Unsatisfied { index });
            return;
        }
        let [da, db, dc] = &mut self.abc;
        da[self.con_len] = v[0];
        db[self.con_len] = v[1];
        // An empty slice when C is not kept.
        if let Some(d) = dc.get_mut(self.con_len) {
            *d = v[2];
        }
        self.con_len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CircuitSpec;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Segments of random sizes: each allocates its aux values and constrains products, sums
    /// with inputs (including zero coefficients) and bits; `wrong` breaks one constraint,
    /// `reach` names the previous segment's variable, `lie` declares one constraint too many.
    struct Blocks {
        sizes: Vec<usize>,
        inputs: usize,
        seed: u64,
        wrong: Option<usize>,
        reach: Option<usize>,
        lie: Option<usize>,
    }

    impl Blocks {
        fn random(seed: u64) -> Self {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let n = rng.gen_range(1..12);
            Self {
                sizes: (0..n).map(|_| rng.gen_range(0..90)).collect(),
                inputs: rng.gen_range(0..4),
                seed,
                wrong: None,
                reach: None,
                lie: None,
            }
        }

        fn input_value(&self, j: usize) -> Scalar {
            Scalar::from(self.seed.wrapping_add(j as u64 * 7) % 1000)
        }
    }

    impl Segmented for Blocks {
        fn alloc_inputs<CS: ConstraintSystem<Scalar>>(
            &self,
            cs: &mut CS,
        ) -> std::result::Result<Vec<Variable>, SynthesisError> {
            (0..self.inputs)
                .map(|j| cs.alloc_input(|| "in", || Ok(self.input_value(j))))
                .collect()
        }

        fn num_segments(&self) -> usize {
            self.sizes.len()
        }

        fn segment_shape(&self, i: usize) -> SegmentShape {
            // Per unit: x, a bit, x·bit; one product, one booleanity, one linear constraint.
            SegmentShape {
                aux: 3 * self.sizes[i],
                constraints: 3 * self.sizes[i] + usize::from(self.lie == Some(i)),
            }
        }

        fn synthesize_segment<CS: ConstraintSystem<Scalar>>(
            &self,
            i: usize,
            cs: &mut CS,
            inputs: &[Variable],
        ) -> std::result::Result<(), SynthesisError> {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ (i as u64) << 32);
            for u in 0..self.sizes[i] {
                let x_val = Scalar::from(rng.gen_range(0..5u64));
                let bit_val = Scalar::from(u64::from(rng.r#gen::<bool>()));
                let x = cs.alloc(|| "x", || Ok(x_val))?;
                let bit = cs.alloc(|| "bit", || Ok(bit_val))?;
                let mut p_val = x_val * bit_val;
                if self.wrong == Some(i) && u == self.sizes[i] / 2 {
                    p_val += Scalar::ONE;
                }
                let p = cs.alloc(|| "p", || Ok(p_val))?;
                cs.enforce(|| "p", |lc| lc + x, |lc| lc + bit, |lc| lc + p);
                cs.enforce(|| "bool", |lc| lc + CS::one() - bit, |lc| lc + bit, |lc| lc);
                // (x + 0·bit + Σ in_j) · 1 = x + Σ in_j, with the inputs in B for odd units.
                let reach = match (self.reach, u) {
                    (Some(r), 0) if r == i => Some(Variable::new_unchecked(Index::Aux(0))),
                    _ => None,
                };
                cs.enforce(
                    || "sum",
                    |mut lc| {
                        lc = lc + x + (Scalar::ZERO, bit);
                        for &v in inputs {
                            lc = lc + v;
                        }
                        if let Some(r) = reach {
                            lc = lc + r;
                        }
                        lc
                    },
                    |lc| {
                        if u % 2 == 1 && !inputs.is_empty() {
                            lc + inputs[u % inputs.len()] - inputs[u % inputs.len()] + CS::one()
                        } else {
                            lc + CS::one()
                        }
                    },
                    |mut lc| {
                        lc = lc + x;
                        for &v in inputs {
                            lc = lc + v;
                        }
                        if let Some(r) = reach {
                            lc = lc + r;
                        }
                        lc
                    },
                );
            }
            Ok(())
        }
    }

    impl Circuit<Scalar> for Blocks {
        fn synthesize<CS: ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> std::result::Result<(), SynthesisError> {
            synthesize_in_order(&self, cs)
        }
    }

    fn sequential() -> SynthesisOptions {
        SynthesisOptions {
            parallel: false,
            ..Default::default()
        }
    }

    fn assert_same(x: &ProvingAssignment, y: &ProvingAssignment, what: &str) {
        assert_eq!(x.a, y.a, "{what}: a");
        assert_eq!(x.b, y.b, "{what}: b");
        assert_eq!(x.c, y.c, "{what}: c");
        assert_eq!(x.input, y.input, "{what}: input");
        assert_eq!(x.aux, y.aux, "{what}: aux");
        assert_eq!(x.a_aux_density, y.a_aux_density, "{what}: A density");
        assert_eq!(
            x.b_input_density, y.b_input_density,
            "{what}: B input density"
        );
        assert_eq!(x.b_aux_density, y.b_aux_density, "{what}: B aux density");
    }

    #[test]
    fn segmented_equals_sequential_for_random_layouts() {
        for seed in 0..40 {
            let seg = synthesize_segmented(&Blocks::random(seed), Default::default()).unwrap();
            let seq = synthesis::synthesize(Blocks::random(seed), sequential()).unwrap();
            assert_same(&seg, &seq, &format!("layout {seed}"));
        }
    }

    #[test]
    fn without_c_both_syntheses_keep_everything_else_and_still_check() {
        let no_c = |parallel| SynthesisOptions {
            parallel,
            keep_c: false,
            ..Default::default()
        };
        for seed in 0..10 {
            let full = synthesis::synthesize(Blocks::random(seed), sequential()).unwrap();
            for parallel in [false, true] {
                let mut got = if parallel {
                    synthesize_segmented(&Blocks::random(seed), no_c(true)).unwrap()
                } else {
                    synthesis::synthesize(Blocks::random(seed), no_c(false)).unwrap()
                };
                assert!(got.c.is_empty(), "layout {seed}, parallel {parallel}");
                assert_eq!(got.c.capacity(), 0);
                // Everything else is the full assignment's, and C is what it would have been.
                got.c = got.a.iter().zip(&got.b).map(|(a, b)| a * b).collect();
                assert_same(&got, &full, &format!("layout {seed}, parallel {parallel}"));
            }
            // The check still runs on the C it no longer keeps.
            let mut wrong = Blocks::random(seed);
            if let Some(i) = wrong.sizes.iter().rposition(|&s| s > 0) {
                wrong.wrong = Some(i);
                let seg = synthesize_segmented(&wrong, no_c(true)).unwrap_err();
                assert!(matches!(seg, ProverError::Unsatisfied { .. }), "{seg}");
            }
        }
    }

    #[test]
    fn segmented_errors_are_the_sequential_ones() {
        for seed in 0..10 {
            let mut c = Blocks::random(seed);
            let Some(i) = c.sizes.iter().rposition(|&s| s > 0) else {
                continue;
            };
            c.wrong = Some(i);
            let seg = synthesize_segmented(&c, Default::default()).unwrap_err();
            let seq = synthesis::synthesize(c, sequential()).unwrap_err();
            let (ProverError::Unsatisfied { index: x }, ProverError::Unsatisfied { index: y }) =
                (&seg, &seq)
            else {
                panic!("{seg} / {seq}");
            };
            assert_eq!(x, y);
        }
    }

    #[test]
    fn a_segment_that_breaks_its_declaration_is_refused() {
        let mut c = Blocks::random(3);
        c.sizes = vec![4, 5, 6];
        c.lie = Some(1);
        let err = synthesize_segmented(&c, Default::default()).unwrap_err();
        assert!(
            matches!(err, ProverError::BadSegment { segment: 1, .. }),
            "{err}"
        );
        // Naming another segment's variable: refused, with the sequential numbering.
        c.lie = None;
        c.reach = Some(2);
        let err = synthesize_segmented(&c, Default::default()).unwrap_err();
        assert!(
            matches!(
                err,
                ProverError::UnknownVariable {
                    kind: "aux",
                    index: 0,
                    constraint: 29,
                    allocated: 30,
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn density_append_matches_pushing() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for _ in 0..20 {
            let parts: Vec<Vec<bool>> = (0..rng.gen_range(1..6))
                .map(|_| (0..rng.gen_range(0..150)).map(|_| rng.r#gen()).collect())
                .collect();
            let mut pushed = Density::new();
            let mut joined = Density::new();
            for p in &parts {
                let mut d = Density::new();
                for &b in p {
                    d.push(b);
                    pushed.push(b);
                }
                joined.append(&d);
            }
            assert_eq!(joined, pushed);
        }
    }

    #[test]
    fn porep_segmented_equals_sequential() {
        for k in [10, 11, 12] {
            let spec = CircuitSpec::parse("porep", k).unwrap();
            let seg = spec
                .with_witness(4)
                .synthesize_assignment(Default::default())
                .unwrap();
            let seq = spec
                .with_witness(4)
                .synthesize_assignment(sequential())
                .unwrap();
            assert_eq!(seg.num_constraints(), 1 << k);
            assert_same(&seg, &seq, &spec.to_string());
            // The tampered witness fails at the same constraint both ways.
            let a = spec
                .with_wrong_witness(4)
                .synthesize_assignment(Default::default())
                .unwrap_err();
            let b = spec
                .with_wrong_witness(4)
                .synthesize_assignment(sequential())
                .unwrap_err();
            assert_eq!(a.to_string(), b.to_string());
            assert!(matches!(a, ProverError::Unsatisfied { .. }), "{a}");
        }
    }

    /// `cargo test -p gpud-prover --lib --release timing_printout -- --ignored --nocapture`
    /// (`GPUD_SYNTH_SIZES=16,18` by default): sequential against parallel synthesis.
    #[test]
    #[ignore = "timing printout, run by hand"]
    fn timing_printout() {
        let sizes = std::env::var("GPUD_SYNTH_SIZES").unwrap_or_else(|_| "16,18".into());
        for k in sizes.split(',').map(|k| k.trim().parse::<u32>().unwrap()) {
            for kind in ["porep", "synthetic"] {
                let spec = CircuitSpec::parse(kind, k).unwrap();
                let t = std::time::Instant::now();
                let seq = spec
                    .with_witness(1)
                    .synthesize_assignment(sequential())
                    .unwrap();
                let t_seq = t.elapsed().as_secs_f64();
                let t = std::time::Instant::now();
                let par = spec
                    .with_witness(1)
                    .synthesize_assignment(Default::default())
                    .unwrap();
                let t_par = t.elapsed().as_secs_f64();
                assert_same(&par, &seq, &spec.to_string());
                let m = (1u64 << k) as f64;
                let b_one = par
                    .b
                    .iter()
                    .filter(|b| **b == Scalar::ONE || bool::from(b.is_zero()))
                    .count();
                println!(
                    "{spec}: {} aux ({:.3} m), {} inputs; A query {:.3} m, B query {:.3} m; B is 0 or 1 at {:.3} of the constraints, aux 0/1 {:.3}",
                    par.aux.len(),
                    par.aux.len() as f64 / m,
                    par.input.len(),
                    (par.a_aux_density.count() + par.input.len()) as f64 / m,
                    (par.b_aux_density.count() + par.b_input_density.count()) as f64 / m,
                    b_one as f64 / m,
                    par.aux
                        .iter()
                        .filter(|v| **v == Scalar::ONE || bool::from(v.is_zero()))
                        .count() as f64
                        / par.aux.len() as f64
                );
                println!(
                    "{spec}: sequential {t_seq:.3} s, parallel {t_par:.3} s on {} threads ({:.2}x)",
                    rayon::current_num_threads(),
                    t_seq / t_par
                );
            }
        }
    }
}
