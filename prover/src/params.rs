//! Groth16 parameters: generated with bellperson's generator, cached on disk, loaded with
//! bellperson's reader.
//!
//! A cache directory holds, per circuit and size, `{circuit}-k{log}-v{version}.params`
//! (bellperson's own format) and a `.meta.json` beside it with the file's length and SHA-256.
//! Both are written to temporary names and renamed into place, so readers never see a partial
//! file. Two processes generating the same key at once both succeed; a reader that catches
//! their renames in between sees a digest mismatch (damaged, regenerate), never a wrong key.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bellperson::groth16::{
    self, Parameters, PreparedVerifyingKey, Proof, VerifyingKey, prepare_verifying_key,
};
use blstrs::{Bls12, Scalar};
use rand_core::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::circuits::CircuitSpec;
use crate::error::{ProverError, Result};
use crate::fft::Domain;
use crate::synthesis::ProvingAssignment;
use crate::vram::KeyShape;

/// Bumped whenever a circuit's constraints change, so old cached parameters are not used.
pub const PARAMS_VERSION: u32 = 1;

/// Files at least this large are parsed from the memory map; smaller ones through a buffered
/// reader (bellperson's two readers).
pub const DEFAULT_MMAP_THRESHOLD: u64 = 64 << 20;

/// A proving key in memory, with its prepared verifying key.
pub struct ProvingKey {
    id: u64,
    name: String,
    params: Parameters<Bls12>,
    pvk: PreparedVerifyingKey<Bls12>,
}

impl std::fmt::Debug for ProvingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvingKey")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("shape", &self.shape())
            .finish()
    }
}

impl ProvingKey {
    /// Wraps parameters; `name` identifies them in logs (the cache key).
    pub fn new(name: impl Into<String>, params: Parameters<Bls12>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let pvk = prepare_verifying_key(&params.vk);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            name: name.into(),
            params,
            pvk,
        }
    }

    /// Unique within the process: a GPU engine keys device-resident bases by it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The cache key the parameters were stored under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// bellperson's parameters (for its own prover and for our engines' bases).
    pub fn params(&self) -> &Parameters<Bls12> {
        &self.params
    }

    /// The verifying key.
    pub fn vk(&self) -> &VerifyingKey<Bls12> {
        &self.params.vk
    }

    /// Number of points in each query.
    pub fn shape(&self) -> KeyShape {
        KeyShape {
            h: self.params.h.len(),
            l: self.params.l.len(),
            a: self.params.a.len(),
            b_g1: self.params.b_g1.len(),
            b_g2: self.params.b_g2.len(),
        }
    }

    /// Checks with bellperson's verifier.
    pub fn verify(&self, proof: &Proof<Bls12>, public_inputs: &[Scalar]) -> Result<bool> {
        Ok(groth16::verify_proof(&self.pvk, proof, public_inputs)?)
    }

    /// Checks that this key was made for the circuit that produced `cs`: every MSM then pairs
    /// each scalar with its base, and a mismatch is an error rather than an index panic.
    pub fn check_fits(&self, cs: &ProvingAssignment, domain: &Domain) -> Result<()> {
        let p = &self.params;
        let checks = [
            ("public inputs", p.vk.ic.len(), cs.input.len()),
            ("H query (domain − 1)", p.h.len(), domain.size() - 1),
            ("L query (aux variables)", p.l.len(), cs.aux.len()),
            (
                "A query (inputs + dense aux)",
                p.a.len(),
                cs.input.len() + cs.a_aux_density.count(),
            ),
            (
                "B query in G1",
                p.b_g1.len(),
                cs.b_input_density.count() + cs.b_aux_density.count(),
            ),
            (
                "B query in G2",
                p.b_g2.len(),
                cs.b_input_density.count() + cs.b_aux_density.count(),
            ),
        ];
        for (what, key, circuit) in checks {
            if key != circuit {
                return Err(ProverError::ParamsMismatch(format!(
                    "{what}: key {} has {key}, circuit needs {circuit}",
                    self.name
                )));
            }
        }
        Ok(())
    }
}

/// What the cache records beside each parameter file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ParamsMeta {
    /// [`PARAMS_VERSION`] at generation time.
    pub version: u32,
    /// Circuit name.
    pub circuit: String,
    /// log2 of the domain.
    pub log_size: u32,
    /// Length of the `.params` file.
    pub bytes: u64,
    /// SHA-256 of the `.params` file, hex.
    pub sha256: String,
    /// Seconds the generator took.
    pub generation_secs: f64,
}

/// A directory of cached parameters.
#[derive(Debug, Clone)]
pub struct ParamsCache {
    dir: PathBuf,
    mmap_threshold: u64,
}

impl ParamsCache {
    /// A cache in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            mmap_threshold: DEFAULT_MMAP_THRESHOLD,
        }
    }

    /// Parses files of at least `bytes` from the memory map (default
    /// [`DEFAULT_MMAP_THRESHOLD`]).
    pub fn with_mmap_threshold(mut self, bytes: u64) -> Self {
        self.mmap_threshold = bytes;
        self
    }

    /// `$GPUD_PROVER_PARAMS`, else `$XDG_CACHE_HOME/gpud-prover`, else
    /// `$HOME/.cache/gpud-prover`, else `/var/tmp/gpud-prover`.
    pub fn default_dir() -> PathBuf {
        let env = |k| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        env("GPUD_PROVER_PARAMS")
            .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("gpud-prover")))
            .or_else(|| env("HOME").map(|d| d.join(".cache/gpud-prover")))
            .unwrap_or_else(|| PathBuf::from("/var/tmp/gpud-prover"))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache key of a circuit at a size.
    pub fn key(spec: &CircuitSpec) -> String {
        format!(
            "{}-k{}-v{}",
            spec.kind().name(),
            spec.log_size(),
            PARAMS_VERSION
        )
    }

    /// Where the parameters of `spec` live.
    pub fn params_path(&self, spec: &CircuitSpec) -> PathBuf {
        self.dir.join(format!("{}.params", Self::key(spec)))
    }

    fn meta_path(&self, spec: &CircuitSpec) -> PathBuf {
        self.dir.join(format!("{}.meta.json", Self::key(spec)))
    }

    /// Whether parameters for `spec` are cached (without validating them).
    pub fn contains(&self, spec: &CircuitSpec) -> bool {
        self.params_path(spec).is_file() && self.meta_path(spec).is_file()
    }

    /// The metadata of cached parameters.
    pub fn meta(&self, spec: &CircuitSpec) -> Result<ParamsMeta> {
        let path = self.meta_path(spec);
        let text = fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ProverError::ParamsMissing {
                    key: Self::key(spec),
                    dir: self.dir.clone(),
                }
            } else {
                ProverError::ParamsIo {
                    path: path.clone(),
                    source: e,
                }
            }
        })?;
        serde_json::from_str(&text).map_err(|e| ProverError::ParamsCorrupt {
            path,
            reason: e.to_string(),
        })
    }

    /// Loads cached parameters, checking length and SHA-256 against the metadata.
    pub fn load(&self, spec: &CircuitSpec) -> Result<ProvingKey> {
        let meta = self.meta(spec)?;
        let path = self.params_path(spec);
        let io = |e| ProverError::ParamsIo {
            path: path.clone(),
            source: e,
        };
        let corrupt = |reason: String| ProverError::ParamsCorrupt {
            path: path.clone(),
            reason,
        };
        if meta.version != PARAMS_VERSION
            || meta.circuit != spec.kind().name()
            || meta.log_size != spec.log_size()
        {
            return Err(corrupt(format!("metadata names {meta:?}")));
        }
        let file = File::open(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ProverError::ParamsMissing {
                    key: Self::key(spec),
                    dir: self.dir.clone(),
                }
            } else {
                io(e)
            }
        })?;
        let len = file.metadata().map_err(io)?.len();
        if len != meta.bytes {
            return Err(corrupt(format!(
                "{len} bytes, metadata says {}",
                meta.bytes
            )));
        }
        // SAFETY: the cache writes files once and replaces them only by rename, so a mapped
        // file is never modified underneath us (a rename leaves the old inode intact).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let digest = hex::encode(Sha256::digest(&map[..]));
        if digest != meta.sha256 {
            return Err(corrupt("SHA-256 does not match the metadata".into()));
        }
        // The digest vouches for the contents we wrote, so the costly subgroup checks are
        // skipped (`checked = false`).
        let params = if len >= self.mmap_threshold {
            Parameters::<Bls12>::read_mmap(&map, false)
        } else {
            drop(map);
            Parameters::<Bls12>::read(BufReader::new(File::open(&path).map_err(io)?), false)
        }
        .map_err(|e| corrupt(e.to_string()))?;
        Ok(ProvingKey::new(Self::key(spec), params))
    }

    /// Generates parameters for `spec` with bellperson's generator and stores them.
    pub fn generate<R: RngCore>(&self, spec: &CircuitSpec, rng: &mut R) -> Result<ProvingKey> {
        let start = Instant::now();
        let params = groth16::generate_random_parameters::<Bls12, _, _>(spec.shape(), rng)?;
        let generation_secs = start.elapsed().as_secs_f64();
        self.store(spec, &params, generation_secs)?;
        Ok(ProvingKey::new(Self::key(spec), params))
    }

    /// Loads `spec`'s parameters, generating them first when missing or damaged. Returns
    /// whether they were generated.
    pub fn load_or_generate<R: RngCore>(
        &self,
        spec: &CircuitSpec,
        rng: &mut R,
    ) -> Result<(ProvingKey, bool)> {
        self.load_else(spec, || self.generate(spec, rng))
    }

    /// [`ParamsCache::load_or_generate`] for a command line: a generation (slow) shows a
    /// spinner on stderr unless `quiet`.
    pub fn load_or_generate_shown(&self, spec: &CircuitSpec, quiet: bool) -> Result<ProvingKey> {
        self.load_else(spec, || {
            let pb = crate::progress::spinner(
                format!("generating parameters for {spec} (slow; cached afterwards)"),
                quiet,
            );
            let key = self.generate(spec, &mut rand::thread_rng());
            pb.finish_and_clear();
            key
        })
        .map(|(key, _)| key)
    }

    /// The cached parameters, or `generate`'s when they are missing or damaged.
    fn load_else(
        &self,
        spec: &CircuitSpec,
        generate: impl FnOnce() -> Result<ProvingKey>,
    ) -> Result<(ProvingKey, bool)> {
        match self.load(spec) {
            Ok(key) => Ok((key, false)),
            Err(ProverError::ParamsMissing { .. } | ProverError::ParamsCorrupt { .. }) => {
                Ok((generate()?, true))
            }
            Err(e) => Err(e),
        }
    }

    fn store(&self, spec: &CircuitSpec, params: &Parameters<Bls12>, secs: f64) -> Result<()> {
        let path = self.params_path(spec);
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |e| ProverError::ParamsIo { path: p, source: e }
        };
        fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        // Unique temporary names: concurrent generators must not write into each other's file.
        let tmp = |ext: &str| {
            self.dir.join(format!(
                ".{}.{}.{}.tmp",
                Self::key(spec),
                std::process::id(),
                ext
            ))
        };
        let (tmp_params, tmp_meta) = (tmp("params"), tmp("meta"));
        let mut hasher = HashingWriter {
            inner: BufWriter::new(File::create(&tmp_params).map_err(io(&tmp_params))?),
            hasher: Sha256::new(),
            bytes: 0,
        };
        params.write(&mut hasher).map_err(io(&tmp_params))?;
        hasher.inner.flush().map_err(io(&tmp_params))?;
        hasher.inner.get_ref().sync_all().map_err(io(&tmp_params))?;
        let meta = ParamsMeta {
            version: PARAMS_VERSION,
            circuit: spec.kind().name().to_owned(),
            log_size: spec.log_size(),
            bytes: hasher.bytes,
            sha256: hex::encode(hasher.hasher.finalize()),
            generation_secs: secs,
        };
        let json = serde_json::to_vec_pretty(&meta).map_err(|e| ProverError::ParamsIo {
            path: tmp_meta.clone(),
            source: e.into(),
        })?;
        fs::write(&tmp_meta, json).map_err(io(&tmp_meta))?;
        // Parameters first: a meta file only ever points at a complete parameter file.
        fs::rename(&tmp_params, &path).map_err(io(&path))?;
        let meta_path = self.meta_path(spec);
        fs::rename(&tmp_meta, &meta_path).map_err(io(&meta_path))?;
        Ok(())
    }
}

struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
