//! The fast parameter generator equals bellperson's `generate_parameters` byte for byte given
//! the same secrets (CPU path here; the GPU path is checked against this one in tests/gpu.rs),
//! and proofs made with its parameters verify.

use bellperson::groth16;
use blstrs::{Bls12, Scalar};
use gpud_client::ExclusiveDevice;
use gpud_prover::paramgen::{self, Backend, Toxic};
use gpud_prover::{CircuitSpec, CpuEngine, ProvingKey, prove};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

fn bytes(p: &groth16::Parameters<Bls12>) -> Vec<u8> {
    let mut v = Vec::new();
    p.write(&mut v).unwrap();
    v
}

#[test]
fn fast_parameters_equal_bellpersons_and_proofs_verify() {
    let mut rng = ChaCha20Rng::seed_from_u64(31);
    for (circuit, k) in [
        ("synthetic", 8),
        ("synthetic", 10),
        ("poseidon", 8),
        // Segmented: evaluated per segment in parallel, no assembly.
        ("porep", 10),
        ("porep", 12),
    ] {
        let spec = CircuitSpec::parse(circuit, k).unwrap();
        let toxic = Toxic::random(&mut rng);
        let (ours, _) = paramgen::generate(spec.shape(), &toxic, Backend::Cpu).unwrap();
        let theirs = groth16::generate_parameters::<Bls12, _>(
            spec.shape(),
            toxic.g1,
            toxic.g2,
            toxic.alpha,
            toxic.beta,
            toxic.gamma,
            toxic.delta,
            toxic.tau,
        )
        .unwrap();
        assert!(bytes(&ours) == bytes(&theirs), "{spec}: parameters differ");
        let key = ProvingKey::new(format!("fast {spec}"), ours);
        let device = ExclusiveDevice::assume_unshared("cpu", 0, u64::MAX);
        let (proof, inputs) = prove::prove(
            &CpuEngine,
            &device,
            &key,
            spec.with_witness(2),
            Scalar::from(7u64),
            Scalar::from(8u64),
        )
        .unwrap();
        assert!(key.verify(&proof, &inputs).unwrap(), "{spec}");
    }
}

#[test]
fn the_same_secrets_give_the_same_parameters_and_others_do_not() {
    let spec = CircuitSpec::parse("synthetic", 6).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let toxic = Toxic::random(&mut rng);
    let a = paramgen::generate(spec.shape(), &toxic, Backend::Cpu)
        .unwrap()
        .0;
    let b = paramgen::generate(spec.shape(), &toxic, Backend::Cpu)
        .unwrap()
        .0;
    assert!(bytes(&a) == bytes(&b));
    let other = Toxic::random(&mut rng);
    let c = paramgen::generate(spec.shape(), &other, Backend::Cpu)
        .unwrap()
        .0;
    assert!(bytes(&a) != bytes(&c));
}
