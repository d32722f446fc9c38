//! End-to-end proofs: verification, bit-exactness against bellperson, wrong witnesses.

mod common;

use bellperson::groth16;
use blstrs::Scalar;
use ff::Field;
use gpud_client::ExclusiveDevice;
use gpud_prover::synthesis::SynthesisOptions;
use gpud_prover::{CpuEngine, ProverError, prove};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn device() -> ExclusiveDevice {
    ExclusiveDevice::assume_unshared("cpu", 0, u64::MAX)
}

#[test]
fn proofs_verify_for_several_circuits_and_sizes() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (circuit, k) in [
        ("synthetic", 8),
        ("synthetic", 10),
        ("synthetic", 12),
        ("poseidon", 10),
        ("poseidon", 12),
        ("porep", 10),
        ("porep", 12),
    ] {
        let (spec, key) = common::key(circuit, k);
        for seed in [1, 2] {
            let (r, s) = (Scalar::random(&mut rng), Scalar::random(&mut rng));
            let (proof, inputs) =
                prove::prove(&CpuEngine, &device(), &key, spec.with_witness(seed), r, s).unwrap();
            assert!(key.verify(&proof, &inputs).unwrap(), "{spec} seed {seed}");
            // The statement matters: another public input must not verify.
            let mut wrong = inputs.clone();
            wrong[0] += Scalar::ONE;
            assert!(!key.verify(&proof, &wrong).unwrap(), "{spec} seed {seed}");
        }
    }
}

#[test]
fn sha256_chain_proof_verifies() {
    let (spec, key) = common::key("sha256", 15);
    let (proof, inputs) = prove::prove(
        &CpuEngine,
        &device(),
        &key,
        spec.with_witness(5),
        Scalar::from(3u64),
        Scalar::from(4u64),
    )
    .unwrap();
    assert_eq!(inputs.len(), 2);
    assert!(key.verify(&proof, &inputs).unwrap());
}

#[test]
fn fixed_r_s_proof_equals_bellpersons_bit_for_bit() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for (circuit, k) in [
        ("synthetic", 9),
        ("synthetic", 11),
        ("poseidon", 10),
        ("sha256", 15),
        ("porep", 11),
    ] {
        let (spec, key) = common::key(circuit, k);
        let (r, s) = (Scalar::random(&mut rng), Scalar::random(&mut rng));
        let (ours, _) =
            prove::prove(&CpuEngine, &device(), &key, spec.with_witness(9), r, s).unwrap();
        let theirs = groth16::create_proof(spec.with_witness(9), key.params(), r, s).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        ours.write(&mut a).unwrap();
        theirs.write(&mut b).unwrap();
        assert_eq!(a, b, "{spec}");
        assert_eq!(ours, theirs);
    }
    // Zero blinding is the degenerate case bellperson also supports.
    let (spec, key) = common::key("synthetic", 9);
    let (ours, _) = prove::prove(
        &CpuEngine,
        &device(),
        &key,
        spec.with_witness(4),
        Scalar::ZERO,
        Scalar::ZERO,
    )
    .unwrap();
    let theirs = groth16::create_proof(
        spec.with_witness(4),
        key.params(),
        Scalar::ZERO,
        Scalar::ZERO,
    )
    .unwrap();
    assert_eq!(ours, theirs);
}

#[test]
fn an_assignment_synthesized_without_c_gives_bellpersons_proof() {
    // The CPU engine makes C as a · b when synthesis did not keep it (what the pipeline does
    // for an engine that makes C itself): the same proof, bit for bit, sequential or
    // segmented synthesis.
    for (circuit, k) in [("synthetic", 10), ("poseidon", 10), ("porep", 11)] {
        let (spec, key) = common::key(circuit, k);
        for parallel in [false, true] {
            let opts = SynthesisOptions {
                parallel,
                keep_c: false,
                ..Default::default()
            };
            let syn = prove::synthesize(&key, spec.with_witness(6), opts).unwrap();
            let out = prove::gpu_phase(&CpuEngine, &device(), &key, syn).unwrap();
            let (r, s) = (Scalar::from(5u64), Scalar::from(8u64));
            let ours = prove::cpu_tail(&key, out, r, s).unwrap();
            let theirs = groth16::create_proof(spec.with_witness(6), key.params(), r, s).unwrap();
            assert_eq!(ours, theirs, "{spec}, parallel {parallel}");
        }
    }
}

#[test]
fn wrong_witness_is_rejected_at_synthesis_or_fails_verification() {
    for (circuit, k) in [("synthetic", 10), ("poseidon", 10), ("porep", 10)] {
        let (spec, key) = common::key(circuit, k);
        // Default: the unsatisfied constraint is found during synthesis.
        let err = prove::prove(
            &CpuEngine,
            &device(),
            &key,
            spec.with_wrong_witness(3),
            Scalar::ONE,
            Scalar::ONE,
        )
        .unwrap_err();
        assert!(
            matches!(err, ProverError::Unsatisfied { .. }),
            "{spec}: {err}"
        );

        // With the check off, the prover runs to the end and the proof does not verify.
        let syn = prove::synthesize(
            &key,
            spec.with_wrong_witness(3),
            SynthesisOptions {
                check_constraints: false,
                ..Default::default()
            },
        )
        .unwrap();
        let out = prove::gpu_phase(&CpuEngine, &device(), &key, syn).unwrap();
        let inputs = out.public_inputs().to_vec();
        let proof = prove::cpu_tail(&key, out, Scalar::from(5u64), Scalar::from(6u64)).unwrap();
        assert!(!key.verify(&proof, &inputs).unwrap(), "{spec}");
    }
}

#[test]
fn key_for_another_circuit_is_a_mismatch_error() {
    let (_, key) = common::key("synthetic", 10);
    let (other, _) = common::key("poseidon", 10);
    let err =
        prove::synthesize(&key, other.with_witness(1), SynthesisOptions::default()).unwrap_err();
    assert!(matches!(err, ProverError::ParamsMismatch(_)), "{err}");
}
