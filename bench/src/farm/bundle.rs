//! The workload on disk: a proving key and a few synthesized witnesses, written once per run by
//! the driver's preparation step and read by every prover process of every cell.
//!
//! Loading the cache's bellperson parameter file costs a prover process several seconds at
//! 2^22 (a SHA-256 over 1.7 GiB and a single-threaded parse, G2 points included) and
//! synthesizing a witness two more, which sixteen cells of a few seconds each cannot afford.
//! These files hold only what the benchmark's provers use, in a form read in parallel:
//!
//! - key: the verifying key (bellperson's encoding) and the H, L, A and B_G1 queries
//!   (uncompressed G1 points, read without the subgroup check, as the parameter cache does for
//!   files it wrote itself). The G2 query is not in it: provers that take the witness's
//!   precomputed G2 sum never read it.
//! - G2 query (written when asked, `--g2-query`): the B query in G2 (uncompressed points), for
//!   provers that compute B_G2 themselves, on the GPU or in the CPU tail
//!   ([`super::G2Mode`]); read with the key by [`read_key_with_g2`].
//! - witness: the A, B, C evaluations, the input and aux assignments and the densities (what
//!   [`gpud_prover::prove::synthesize`] records), and the G2 sum `Σ b_i·B_i` of that witness,
//!   which depends on nothing else.
//!
//! Both are scratch files of one run on one machine; a magic number and every length are
//! checked on reading.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use bellperson::groth16::{Parameters, VerifyingKey};
use blstrs::{Bls12, G1Affine, G2Affine, Scalar};
use group::Curve;
use rayon::prelude::*;

use super::{FarmError, FarmResult, io_err};
use gpud_prover::circuits::{CircuitKind, CircuitSpec};
use gpud_prover::engine::G1Scalars;
use gpud_prover::fft::Domain;
use gpud_prover::params::ProvingKey;
use gpud_prover::synthesis::{Density, SynthesisOptions};

const KEY_MAGIC: &[u8; 8] = b"GPUDFK01";
const WITNESS_MAGIC: &[u8; 8] = b"GPUDFW01";
const G2_MAGIC: &[u8; 8] = b"GPUDFG01";

/// Where the key of `spec` lives in a bundle directory.
pub fn key_path(dir: &Path, spec: &CircuitSpec) -> std::path::PathBuf {
    dir.join(format!("{}-k{}.key", spec.kind().name(), spec.log_size()))
}

/// Where the G2 query of `spec`'s key lives in a bundle directory.
pub fn g2_path(dir: &Path, spec: &CircuitSpec) -> std::path::PathBuf {
    dir.join(format!("{}-k{}.g2", spec.kind().name(), spec.log_size()))
}

/// Where witness `index` of `spec` lives in a bundle directory.
pub fn witness_path(dir: &Path, spec: &CircuitSpec, index: usize) -> std::path::PathBuf {
    dir.join(format!(
        "{}-k{}-w{index}.wit",
        spec.kind().name(),
        spec.log_size()
    ))
}

/// Writes the parts of `params` the benchmark's provers use.
pub fn write_key(path: &Path, spec: &CircuitSpec, params: &Parameters<Bls12>) -> FarmResult<()> {
    let mut w = Writer::create(path)?;
    w.bytes(KEY_MAGIC)?;
    w.spec(spec)?;
    let mut vk = Vec::new();
    params.vk.write(&mut vk).map_err(io_err(path))?;
    w.u64(vk.len() as u64)?;
    w.bytes(&vk)?;
    for q in [&params.h, &params.l, &params.a, &params.b_g1] {
        w.g1s(q)?;
    }
    w.finish()
}

/// Writes the G2 query of `params` (the B query over G2).
pub fn write_g2_query(
    path: &Path,
    spec: &CircuitSpec,
    params: &Parameters<Bls12>,
) -> FarmResult<()> {
    let mut w = Writer::create(path)?;
    w.bytes(G2_MAGIC)?;
    w.spec(spec)?;
    w.g2s(&params.b_g2)?;
    w.finish()
}

/// Reads a G2 query written by [`write_g2_query`].
pub fn read_g2_query(path: &Path) -> FarmResult<(CircuitSpec, Vec<G2Affine>)> {
    let data = fs::read(path).map_err(io_err(path))?;
    let mut r = Reader::new(path, &data);
    r.magic(G2_MAGIC)?;
    let spec = r.spec()?;
    let points = r.g2s()?;
    r.end()?;
    Ok((spec, points))
}

/// Reads a key written by [`write_key`]; the G2 query is empty.
pub fn read_key(path: &Path) -> FarmResult<(CircuitSpec, ProvingKey)> {
    read_key_with_g2(path, None)
}

/// Reads a key written by [`write_key`], with the G2 query from `g2` (written by
/// [`write_g2_query`] for the same circuit, one point per B_G1 point), or without it.
pub fn read_key_with_g2(path: &Path, g2: Option<&Path>) -> FarmResult<(CircuitSpec, ProvingKey)> {
    let data = fs::read(path).map_err(io_err(path))?;
    let mut r = Reader::new(path, &data);
    r.magic(KEY_MAGIC)?;
    let spec = r.spec()?;
    let vk_len = r.len()?;
    let vk = VerifyingKey::<Bls12>::read(r.take(vk_len)?).map_err(io_err(path))?;
    let h = r.g1s()?;
    let l = r.g1s()?;
    let a = r.g1s()?;
    let b_g1 = r.g1s()?;
    r.end()?;
    drop(data);
    let b_g2 = match g2 {
        None => Vec::new(),
        Some(g2) => {
            let (g2_spec, points) = read_g2_query(g2)?;
            let bad = |reason: String| FarmError::Format {
                path: g2.to_path_buf(),
                reason,
            };
            if g2_spec != spec {
                return Err(bad(format!("a G2 query of {g2_spec}, the key is {spec}")));
            }
            if points.len() != b_g1.len() {
                return Err(bad(format!(
                    "{} G2 points, the key's B query has {}",
                    points.len(),
                    b_g1.len()
                )));
            }
            points
        }
    };
    let params = Parameters {
        vk,
        h: Arc::new(h),
        l: Arc::new(l),
        a: Arc::new(a),
        b_g1: Arc::new(b_g1),
        b_g2: Arc::new(b_g2),
    };
    Ok((spec, ProvingKey::new(format!("farm {spec}"), params)))
}

/// A synthesized witness, ready for any number of GPU phases.
#[derive(Debug)]
pub struct FarmWitness {
    /// The witness seed.
    pub seed: u64,
    /// The evaluation domain.
    pub domain: Arc<Domain>,
    /// Evaluations of the A combinations (one per constraint).
    pub a: Vec<Scalar>,
    /// Evaluations of the B combinations.
    pub b: Vec<Scalar>,
    /// Evaluations of the C combinations.
    pub c: Vec<Scalar>,
    /// Public inputs; `input[0]` is one.
    pub input: Vec<Scalar>,
    /// Private variables.
    pub aux: Vec<Scalar>,
    /// Aux variables present in the A query.
    pub a_aux_density: Density,
    /// Inputs present in the B query.
    pub b_input_density: Density,
    /// Aux variables present in the B query.
    pub b_aux_density: Density,
    /// `Σ b_i·B_i` over G2: the CPU tail's MSM, which depends only on the witness.
    pub b_g2: G2Affine,
}

impl FarmWitness {
    /// Synthesizes `spec` with the witness of `seed` against `params` (the full parameters,
    /// with the G2 query) and computes its G2 sum.
    pub fn synthesize(
        spec: &CircuitSpec,
        params: &Parameters<Bls12>,
        seed: u64,
    ) -> FarmResult<Self> {
        let cs = gpud_prover::synthesis::synthesize(
            spec.with_witness(seed),
            SynthesisOptions::default(),
        )?;
        let domain = Domain::for_constraints(cs.num_constraints())?;
        let gpud_prover::synthesis::ProvingAssignment {
            a,
            b,
            c,
            input,
            aux,
            a_aux_density,
            b_input_density,
            b_aux_density,
            ..
        } = cs;
        let b_in = b_input_density.count();
        let b_total = b_in + b_aux_density.count();
        if params.b_g2.len() != b_total {
            return Err(gpud_prover::ProverError::ParamsMismatch(format!(
                "B query in G2: key has {}, circuit needs {b_total}",
                params.b_g2.len()
            ))
            .into());
        }
        let b_g2 = gpud_prover::prove::b_g2_sum(
            &params.b_g2,
            &input,
            &aux,
            &b_input_density,
            &b_aux_density,
        );
        Ok(Self {
            seed,
            domain,
            a,
            b,
            c,
            input,
            aux,
            a_aux_density,
            b_input_density,
            b_aux_density,
            b_g2: b_g2.to_affine(),
        })
    }

    /// The public inputs as the verifier takes them.
    pub fn public_inputs(&self) -> &[Scalar] {
        self.input.get(1..).unwrap_or(&[])
    }

    /// Frees the evaluations and assignments, keeping the seed, the inputs and the G2 sum: a
    /// prover that synthesizes each witness anew (the host modes) needs no more, and holds no
    /// more than a real prover does.
    pub fn keep_seed_only(&mut self) {
        self.a = Vec::new();
        self.b = Vec::new();
        self.c = Vec::new();
        self.aux = Vec::new();
        self.a_aux_density = Density::new();
        self.b_aux_density = Density::new();
    }

    /// What the G1 MSMs need.
    pub fn scalars(&self) -> G1Scalars<'_> {
        G1Scalars {
            input: &self.input,
            aux: &self.aux,
            a_aux_density: &self.a_aux_density,
            b_input_density: &self.b_input_density,
            b_aux_density: &self.b_aux_density,
        }
    }

    /// Checks that `key` was made for this witness's circuit (every MSM pairs each scalar with
    /// its base), as [`ProvingKey::check_fits`] does for a fresh synthesis.
    pub fn check_fits(&self, key: &ProvingKey) -> FarmResult<()> {
        let p = key.params();
        let checks = [
            ("public inputs", p.vk.ic.len(), self.input.len()),
            ("H query", p.h.len(), self.domain.size() - 1),
            ("L query", p.l.len(), self.aux.len()),
            (
                "A query",
                p.a.len(),
                self.input.len() + self.a_aux_density.count(),
            ),
            (
                "B query in G1",
                p.b_g1.len(),
                self.b_input_density.count() + self.b_aux_density.count(),
            ),
        ];
        let b_count = self.b_input_density.count() + self.b_aux_density.count();
        // The G2 query is there only for provers that compute B_G2 themselves.
        let g2_check = (!p.b_g2.is_empty()).then_some(("B query in G2", p.b_g2.len(), b_count));
        for (what, k, w) in checks.into_iter().chain(g2_check) {
            if k != w {
                return Err(gpud_prover::ProverError::ParamsMismatch(format!(
                    "{what}: key {} has {k}, witness {} needs {w}",
                    key.name(),
                    self.seed
                ))
                .into());
            }
        }
        if [self.b.len(), self.c.len()] != [self.a.len(); 2] || self.a.len() > self.domain.size() {
            return Err(gpud_prover::ProverError::ParamsMismatch(format!(
                "witness {}: {} / {} / {} evaluations for a domain of {}",
                self.seed,
                self.a.len(),
                self.b.len(),
                self.c.len(),
                self.domain.size()
            ))
            .into());
        }
        Ok(())
    }

    /// Writes the witness.
    pub fn write(&self, path: &Path, spec: &CircuitSpec) -> FarmResult<()> {
        let mut w = Writer::create(path)?;
        w.bytes(WITNESS_MAGIC)?;
        w.spec(spec)?;
        w.u64(self.seed)?;
        for v in [&self.a, &self.b, &self.c, &self.input, &self.aux] {
            w.scalars(v)?;
        }
        for d in [
            &self.a_aux_density,
            &self.b_input_density,
            &self.b_aux_density,
        ] {
            w.density(d)?;
        }
        w.bytes(&self.b_g2.to_uncompressed())?;
        w.finish()
    }

    /// Reads a witness written by [`FarmWitness::write`]; returns its circuit too.
    pub fn read(path: &Path) -> FarmResult<(CircuitSpec, Self)> {
        let data = fs::read(path).map_err(io_err(path))?;
        let mut r = Reader::new(path, &data);
        r.magic(WITNESS_MAGIC)?;
        let spec = r.spec()?;
        let seed = r.u64()?;
        let a = r.scalars()?;
        let b = r.scalars()?;
        let c = r.scalars()?;
        let input = r.scalars()?;
        let aux = r.scalars()?;
        let a_aux_density = r.density()?;
        let b_input_density = r.density()?;
        let b_aux_density = r.density()?;
        let mut g2 = [0u8; 192];
        g2.copy_from_slice(r.take(192)?);
        let b_g2 = Option::from(G2Affine::from_uncompressed(&g2))
            .ok_or_else(|| r.bad("the G2 sum is not a valid point"))?;
        r.end()?;
        let domain = Domain::for_constraints(a.len())?;
        Ok((
            spec,
            Self {
                seed,
                domain,
                a,
                b,
                c,
                input,
                aux,
                a_aux_density,
                b_input_density,
                b_aux_density,
                b_g2,
            },
        ))
    }
}

struct Writer<'p> {
    path: &'p Path,
    tmp: std::path::PathBuf,
    out: BufWriter<fs::File>,
}

impl<'p> Writer<'p> {
    /// Written under a temporary name and renamed into place when finished.
    fn create(path: &'p Path) -> FarmResult<Self> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let file = fs::File::create(&tmp).map_err(io_err(&tmp))?;
        Ok(Self {
            path,
            tmp,
            out: BufWriter::with_capacity(1 << 20, file),
        })
    }

    fn bytes(&mut self, b: &[u8]) -> FarmResult<()> {
        self.out.write_all(b).map_err(io_err(self.path))
    }

    fn u64(&mut self, v: u64) -> FarmResult<()> {
        self.bytes(&v.to_le_bytes())
    }

    fn spec(&mut self, spec: &CircuitSpec) -> FarmResult<()> {
        let name = spec.kind().name().as_bytes();
        self.u64(name.len() as u64)?;
        self.bytes(name)?;
        self.u64(u64::from(spec.log_size()))
    }

    fn scalars(&mut self, v: &[Scalar]) -> FarmResult<()> {
        self.encoded(v, 1 << 16, Scalar::to_bytes_le)
    }

    fn g1s(&mut self, v: &[G1Affine]) -> FarmResult<()> {
        self.encoded(v, 1 << 16, G1Affine::to_uncompressed)
    }

    fn g2s(&mut self, v: &[G2Affine]) -> FarmResult<()> {
        self.encoded(v, 1 << 15, G2Affine::to_uncompressed)
    }

    /// `v` length-prefixed, each item as its `N` bytes from `encode`, encoded in parallel
    /// `chunk` items at a time (so the buffer stays a few MiB).
    fn encoded<T: Sync, const N: usize>(
        &mut self,
        v: &[T],
        chunk: usize,
        encode: impl Fn(&T) -> [u8; N] + Sync,
    ) -> FarmResult<()> {
        self.u64(v.len() as u64)?;
        for chunk in v.chunks(chunk) {
            let bytes: Vec<u8> = chunk.par_iter().flat_map_iter(&encode).collect();
            self.bytes(&bytes)?;
        }
        Ok(())
    }

    fn density(&mut self, d: &Density) -> FarmResult<()> {
        self.u64(d.len() as u64)?;
        let mut words = vec![0u64; d.len().div_ceil(64)];
        for i in 0..d.len() {
            if d.get(i) {
                words[i / 64] |= 1 << (i % 64);
            }
        }
        for w in words {
            self.u64(w)?;
        }
        Ok(())
    }

    fn finish(mut self) -> FarmResult<()> {
        self.out.flush().map_err(io_err(self.path))?;
        drop(self.out);
        fs::rename(&self.tmp, self.path).map_err(io_err(self.path))
    }
}

struct Reader<'a> {
    path: &'a Path,
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(path: &'a Path, data: &'a [u8]) -> Self {
        Self { path, data, at: 0 }
    }

    fn bad(&self, reason: impl Into<String>) -> FarmError {
        FarmError::Format {
            path: self.path.to_path_buf(),
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: usize) -> FarmResult<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| self.bad(format!("truncated at byte {}", self.at)))?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u64(&mut self) -> FarmResult<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    /// A length that must fit in what is left of the file (in bytes, at least).
    fn len(&mut self) -> FarmResult<usize> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.data.len() - self.at)
            .ok_or_else(|| self.bad(format!("length {n} exceeds the file")))
    }

    fn magic(&mut self, magic: &[u8; 8]) -> FarmResult<()> {
        if self.take(8)? != magic {
            return Err(self.bad("not a farm bundle file of this version"));
        }
        Ok(())
    }

    fn spec(&mut self) -> FarmResult<CircuitSpec> {
        let n = self.len()?;
        let name = std::str::from_utf8(self.take(n)?)
            .map_err(|_| self.bad("circuit name is not UTF-8"))?
            .to_owned();
        let k = u32::try_from(self.u64()?).map_err(|_| self.bad("log size out of range"))?;
        Ok(CircuitSpec::new(CircuitKind::from_name(&name)?, k)?)
    }

    fn scalars(&mut self) -> FarmResult<Vec<Scalar>> {
        self.decoded("a scalar is not canonical", |b| {
            Scalar::from_bytes_le(b).into()
        })
    }

    fn g1s(&mut self) -> FarmResult<Vec<G1Affine>> {
        self.decoded("a G1 point is not on the curve", |b| {
            G1Affine::from_uncompressed_unchecked(b).into()
        })
    }

    fn g2s(&mut self) -> FarmResult<Vec<G2Affine>> {
        self.decoded("a G2 point is not on the curve", |b| {
            G2Affine::from_uncompressed_unchecked(b).into()
        })
    }

    /// A length-prefixed run of `N`-byte items, each decoded by `decode` (in parallel); `bad`
    /// names the error when one does not decode.
    fn decoded<T, const N: usize>(
        &mut self,
        bad: &str,
        decode: impl Fn(&[u8; N]) -> Option<T> + Sync,
    ) -> FarmResult<Vec<T>>
    where
        T: Send,
    {
        let n = self.len()?;
        let bytes = self.take(n.checked_mul(N).ok_or_else(|| self.bad("too long"))?)?;
        let v: Option<Vec<T>> = bytes
            .par_chunks_exact(N)
            .map(|c| {
                let mut b = [0u8; N];
                b.copy_from_slice(c);
                decode(&b)
            })
            .collect();
        v.ok_or_else(|| self.bad(bad))
    }

    fn density(&mut self) -> FarmResult<Density> {
        let n = self.u64()?;
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n.div_ceil(64) * 8 <= self.data.len() - self.at)
            .ok_or_else(|| self.bad(format!("a density of {n} bits exceeds the file")))?;
        let mut d = Density::new();
        let bytes = self.take(n.div_ceil(64) * 8)?;
        for i in 0..n {
            let w = u64::from_le_bytes(
                bytes[(i / 64) * 8..(i / 64) * 8 + 8]
                    .try_into()
                    .map_err(|_| self.bad("density word"))?,
            );
            d.push(w & (1 << (i % 64)) != 0);
        }
        Ok(d)
    }

    fn end(&self) -> FarmResult<()> {
        if self.at != self.data.len() {
            return Err(self.bad(format!("{} trailing bytes", self.data.len() - self.at)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blstrs::G2Projective;
    use gpud_prover::paramgen::{self, Backend, Toxic};
    use rand::SeedableRng;

    #[test]
    fn key_and_witness_round_trip_and_prove() {
        let spec = CircuitSpec::parse("synthetic", 8).unwrap();
        let toxic = Toxic::random(&mut rand_chacha::ChaCha20Rng::seed_from_u64(3));
        let (params, _) = paramgen::generate(spec.shape(), &toxic, Backend::Cpu).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kp = key_path(dir.path(), &spec);
        write_key(&kp, &spec, &params).unwrap();
        let (spec2, key) = read_key(&kp).unwrap();
        assert_eq!(spec2, spec);
        assert_eq!(key.params().h, params.h);
        assert_eq!(key.params().b_g1, params.b_g1);
        assert!(key.params().b_g2.is_empty());

        let w = FarmWitness::synthesize(&spec, &params, 11).unwrap();
        let wp = witness_path(dir.path(), &spec, 0);
        w.write(&wp, &spec).unwrap();
        let (_, back) = FarmWitness::read(&wp).unwrap();
        assert_eq!(
            (back.a.clone(), back.aux.clone()),
            (w.a.clone(), w.aux.clone())
        );
        assert_eq!(back.b_aux_density, w.b_aux_density);
        assert_eq!(back.b_g2, w.b_g2);
        back.check_fits(&key).unwrap();

        // A proof from the bundle's key and witness (GPU phase on the CPU engine, the cached
        // G2 sum) verifies; the same with a damaged G2 sum does not.
        let lease = gpud_client::ExclusiveDevice::assume_unshared("cpu", 0, u64::MAX);
        let out = gpud_prover::engine::Engine::gpu_phase(
            &gpud_prover::CpuEngine,
            &lease,
            &key,
            gpud_prover::engine::PhaseInput {
                domain: &back.domain,
                a: back.a.clone(),
                b: back.b.clone(),
                c: back.c.clone(),
                scalars: back.scalars(),
            },
        )
        .unwrap();
        let (r, s) = (Scalar::from(5u64), Scalar::from(7u64));
        let proof = gpud_prover::prove::assemble(&key, &out.sums, back.b_g2.into(), r, s).unwrap();
        assert!(key.verify(&proof, back.public_inputs()).unwrap());
        let wrong = G2Projective::from(back.b_g2) + G2Projective::from(back.b_g2);
        let proof = gpud_prover::prove::assemble(&key, &out.sums, wrong, r, s).unwrap();
        assert!(!key.verify(&proof, back.public_inputs()).unwrap());

        // The G2 query: read back with the key, it gives the witness's precomputed sum.
        let gp = g2_path(dir.path(), &spec);
        write_g2_query(&gp, &spec, &params).unwrap();
        let (_, with_g2) = read_key_with_g2(&kp, Some(&gp)).unwrap();
        assert_eq!(with_g2.params().b_g2, params.b_g2);
        back.check_fits(&with_g2).unwrap();
        let s = back.scalars();
        let sum = gpud_prover::prove::b_g2_sum(
            &with_g2.params().b_g2,
            s.input,
            s.aux,
            s.b_input_density,
            s.b_aux_density,
        );
        assert_eq!(sum.to_affine(), back.b_g2);
        // A G2 query of another circuit, or of another length, is refused.
        let other = CircuitSpec::parse("synthetic", 9).unwrap();
        let (other_params, _) = paramgen::generate(other.shape(), &toxic, Backend::Cpu).unwrap();
        let op = g2_path(dir.path(), &other);
        write_g2_query(&op, &other, &other_params).unwrap();
        let err = read_key_with_g2(&kp, Some(&op)).unwrap_err();
        assert!(err.to_string().contains("a G2 query of"), "{err}");
        let mut short = params.clone();
        short.b_g2 = Arc::new(params.b_g2[1..].to_vec());
        write_g2_query(&op, &spec, &short).unwrap();
        let err = read_key_with_g2(&kp, Some(&op)).unwrap_err();
        assert!(err.to_string().contains("G2 points"), "{err}");

        // Damage is a typed error, not a panic.
        let mut g2_bytes = fs::read(&gp).unwrap();
        g2_bytes.truncate(g2_bytes.len() - 7);
        fs::write(&gp, &g2_bytes).unwrap();
        assert!(matches!(
            read_key_with_g2(&kp, Some(&gp)),
            Err(FarmError::Format { .. })
        ));
        let mut bytes = fs::read(&wp).unwrap();
        bytes.truncate(bytes.len() - 5);
        fs::write(&wp, &bytes).unwrap();
        assert!(matches!(
            FarmWitness::read(&wp),
            Err(FarmError::Format { .. })
        ));
        fs::write(&kp, b"not a key").unwrap();
        assert!(matches!(read_key(&kp), Err(FarmError::Format { .. })));
    }
}
