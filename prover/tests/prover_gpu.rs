//! The CUDA engine on a GPU: run with `--ignored` on a machine with an NVIDIA GPU
//! (`gpu/run-suite.sh prover-tests` runs the release build from `.gpu/tests/prover_gpu`). Without a GPU they are skipped visibly (ignored, with
//! the reason). Parameters are generated in-process with bellperson's generator (seconds at
//! these sizes on 16 cores).

mod common;

use bellperson::groth16;
use blstrs::Scalar;
use ff::Field;
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_prover::engine::{CudaEngine, CudaOptions, Engine, G2Placement};
use gpud_prover::lease::LocalLeaser;
use gpud_prover::pipeline::{self, PipelineConfig};
use gpud_prover::plan::{self, BasesAt, PlanError, PlanInput};
use gpud_prover::synthesis::SynthesisOptions;
use gpud_prover::{CpuEngine, ProverError, prove};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn first_gpu() -> gpud_cuda::driver::DeviceInfo {
    gpud_cuda::driver::list_devices()
        .expect("CUDA driver")
        .into_iter()
        .next()
        .expect("a GPU")
}

fn claim(vram: u64) -> ExclusiveDevice {
    let info = first_gpu();
    ExclusiveDevice::assume_unshared(info.uuid, info.ordinal as u32, vram)
}

/// Proves `spec` with witness `seed` on `cuda` under `lease` and checks that the proof
/// verifies; `what` names the case in the failure.
fn assert_proves(
    cuda: &CudaEngine,
    lease: &ExclusiveDevice,
    key: &gpud_prover::ProvingKey,
    spec: &gpud_prover::CircuitSpec,
    seed: u64,
    what: &str,
) {
    let (proof, inputs) = prove::prove(
        cuda,
        lease,
        key,
        spec.with_witness(seed),
        Scalar::ONE,
        Scalar::ONE,
    )
    .unwrap();
    assert!(key.verify(&proof, &inputs).unwrap(), "{spec} {what}");
}

/// Checks that `ours`, a proof of `spec` with witness `seed` and randomness `r, s`, is
/// bellperson's `create_proof` bit for bit and verifies with `inputs`; `what` names the case.
fn assert_bellpersons_proof(
    key: &gpud_prover::ProvingKey,
    spec: &gpud_prover::CircuitSpec,
    seed: u64,
    (r, s): (Scalar, Scalar),
    ours: &groth16::Proof<blstrs::Bls12>,
    inputs: &[Scalar],
    what: &str,
) {
    let theirs = groth16::create_proof(spec.with_witness(seed), key.params(), r, s).unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    ours.write(&mut a).unwrap();
    theirs.write(&mut b).unwrap();
    assert_eq!(a, b, "{spec} {what}");
    assert!(key.verify(ours, inputs).unwrap(), "{spec} {what}");
}

fn engine(resident: bool, pin_bases: bool) -> CudaEngine {
    engine_g2(resident, pin_bases, G2Placement::Auto)
}

fn engine_g2(resident: bool, pin_bases: bool, g2: G2Placement) -> CudaEngine {
    CudaEngine::new(CudaOptions {
        resident_bases: resident,
        pin_bases,
        g2,
        vram_budget: None,
        c_on_device: true,
    })
    .expect("CUDA engine")
}

const CASES: [(&str, u32); 6] = [
    ("synthetic", 10),
    ("synthetic", 14),
    ("poseidon", 12),
    ("sha256", 15),
    ("synthetic", 9),
    // Segmented, synthesized on all cores.
    ("porep", 12),
];

#[test]
#[ignore = "needs a GPU"]
fn cuda_proofs_equal_bellpersons_create_proof_bit_for_bit_and_verify() {
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    // Bases uploaded per phase from ordinary and from page-locked memory, and resident.
    for (resident, pin) in [(false, false), (false, true), (true, false)] {
        let cuda = engine(resident, pin);
        for (circuit, k) in CASES {
            let (spec, key) = common::key(circuit, k);
            let log = gpud_prover::fft::Domain::for_constraints(
                prove::synthesize(&key, spec.with_witness(3), SynthesisOptions::default())
                    .unwrap()
                    .num_constraints(),
            )
            .unwrap()
            .log_size();
            // Resident: the bases live under their own VRAM-only lease; the phase lease holds
            // only the working memory.
            let resident_lease = claim(cuda.resident_bytes(&key));
            if resident {
                cuda.load_resident(&key, &resident_lease).unwrap();
            }
            let lease = claim(cuda.vram_bytes(&key, log));
            for (seed, r, s) in [
                (3u64, Scalar::random(&mut rng), Scalar::random(&mut rng)),
                (4, Scalar::ZERO, Scalar::ZERO),
            ] {
                let (ours, inputs) =
                    prove::prove(&cuda, &lease, &key, spec.with_witness(seed), r, s).unwrap();
                let what = format!("seed {seed} resident {resident} pinned {pin}");
                assert_bellpersons_proof(&key, &spec, seed, (r, s), &ours, &inputs, &what);
            }
            if resident {
                cuda.unload_resident(&key, Some(&lease)).unwrap();
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn g2_on_the_gpu_gives_bellpersons_proof_and_g2_on_the_cpu_too() {
    let mut rng = ChaCha8Rng::seed_from_u64(78);
    for (g2, resident, pin) in [
        (G2Placement::Gpu, true, false),
        (G2Placement::Gpu, false, true),
        (G2Placement::Gpu, false, false),
        (G2Placement::Cpu, true, false),
    ] {
        let cuda = engine_g2(resident, pin, g2);
        for (circuit, k) in [("synthetic", 12), ("poseidon", 12), ("synthetic", 16)] {
            let (spec, key) = common::key(circuit, k);
            let on_gpu = g2 == G2Placement::Gpu;
            assert_eq!(cuda.g2_on_gpu(&key), on_gpu);
            let without = engine_g2(resident, pin, G2Placement::Cpu);
            // The G2 bases join the resident set (and the G2 step the phase) only on the GPU.
            if on_gpu {
                assert!(cuda.resident_bytes(&key) > without.resident_bytes(&key) || !resident);
            }
            let syn =
                prove::synthesize(&key, spec.with_witness(5), SynthesisOptions::default()).unwrap();
            let log = syn.log_domain();
            let resident_lease = claim(cuda.resident_bytes(&key));
            if resident {
                cuda.load_resident(&key, &resident_lease).unwrap();
            }
            let lease = claim(cuda.vram_bytes(&key, log));
            let out = prove::gpu_phase(&cuda, &lease, &key, syn).unwrap();
            assert_eq!(out.b_g2.is_some(), on_gpu, "{spec} {g2:?}");
            if on_gpu {
                assert_eq!(out.b_g2, Some(prove::b_g2_on_cpu(&key, &out)));
                assert!(out.timings.msm_b_g2 > 0.0);
            } else {
                assert_eq!(out.timings.msm_b_g2, 0.0);
            }
            let (r, s) = (Scalar::random(&mut rng), Scalar::random(&mut rng));
            let inputs = out.public_inputs().to_vec();
            let ours = prove::cpu_tail(&key, out, r, s).unwrap();
            let what = format!("{g2:?} resident {resident} pinned {pin}");
            assert_bellpersons_proof(&key, &spec, 5, (r, s), &ours, &inputs, &what);
            if resident {
                cuda.unload_resident(&key, Some(&lease)).unwrap();
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn cuda_and_cpu_engines_give_the_same_g1_sums_on_a_wrong_witness() {
    // With the constraint check off, an unsatisfied witness still runs through both engines:
    // with C uploaded the GPU must compute the same (non-vanishing) h and sums as the CPU.
    // With C made on the device (a · b, which an unsatisfied witness's C is not) only h
    // differs: neither proof is valid.
    let uploaded = CudaEngine::new(CudaOptions {
        c_on_device: false,
        ..CudaOptions::default()
    })
    .expect("CUDA engine");
    let derived = engine(false, true);
    for (circuit, k) in [("synthetic", 11), ("poseidon", 10)] {
        let (spec, key) = common::key(circuit, k);
        let opts = SynthesisOptions {
            check_constraints: false,
            ..Default::default()
        };
        let phase = |engine: &dyn gpud_prover::engine::Engine| {
            let syn = prove::synthesize(&key, spec.with_wrong_witness(2), opts).unwrap();
            let lease = claim(uploaded.vram_bytes(&key, syn.log_domain()));
            prove::gpu_phase(engine, &lease, &key, syn).unwrap().g1
        };
        let (gpu, cpu, gpu_c) = (phase(&uploaded), phase(&CpuEngine), phase(&derived));
        assert_eq!(gpu, cpu, "{spec}");
        assert_ne!(gpu_c.h, cpu.h, "{spec}: the wrong witness's C is a · b");
        assert_eq!(
            (gpu_c.l, gpu_c.a, gpu_c.b_g1),
            (cpu.l, cpu.a, cpu.b_g1),
            "{spec}"
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn c_made_on_the_device_and_the_msms_first_order_give_bellpersons_proof() {
    // Resident bases: with the least lease (H first) and with room to spare (a and b copied
    // while L, A, B_G1 and B_G2 run), C made on the device or uploaded: bit for bit.
    let (spec, key) = common::key("porep", 12);
    let (r, s) = (Scalar::from(3u64), Scalar::from(5u64));
    for c_on_device in [true, false] {
        for room in [false, true] {
            let cuda = CudaEngine::new(CudaOptions {
                resident_bases: true,
                pin_bases: false,
                g2: G2Placement::Gpu,
                vram_budget: room.then_some(1 << 40),
                c_on_device,
            })
            .expect("CUDA engine");
            let resident_lease = claim(cuda.resident_bytes(&key));
            cuda.load_resident(&key, &resident_lease).unwrap();
            let syn =
                prove::synthesize(&key, spec.with_witness(9), SynthesisOptions::default()).unwrap();
            let lease = claim(cuda.vram_bytes(&key, syn.log_domain()));
            let out = prove::gpu_phase(&cuda, &lease, &key, syn).unwrap();
            let t = out.timings;
            let what = format!("C on the device {c_on_device}, room {room}");
            assert_eq!(t.overlapped, room, "{what}");
            assert!(t.measured_peak <= t.planned_peak, "{what}: {t:?}");
            assert!(t.planned_peak <= lease.vram_bytes(), "{what}: {t:?}");
            let inputs = out.public_inputs().to_vec();
            let ours = prove::cpu_tail(&key, out, r, s).unwrap();
            assert_bellpersons_proof(&key, &spec, 9, (r, s), &ours, &inputs, &what);
            cuda.unload_resident(&key, Some(&lease)).unwrap();
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_phase_lease_smaller_than_the_formula_fails_typed_and_leaks_nothing() {
    let cuda = engine(false, true);
    let (spec, key) = common::key("synthetic", 12);
    let need = cuda.vram_bytes(&key, 12);
    // The phase plans within its lease: below the smallest plan it fails typed, naming it,
    // before anything is allocated.
    let smallest = match plan::plan(&PlanInput {
        shape: key.shape(),
        log_domain: 12,
        multiprocessors: first_gpu().multiprocessors,
        g2_on_gpu: cuda.g2_on_gpu(&key),
        bases: BasesAt::Host { pinned: true },
        budget: 0,
    }) {
        Err(PlanError::DoesNotFit { needed, .. }) => needed,
        other => panic!("{other:?}"),
    };
    assert!(smallest <= need);
    let small = claim(smallest - 1);
    let err = prove::prove(
        &cuda,
        &small,
        &key,
        spec.with_witness(1),
        Scalar::ONE,
        Scalar::ONE,
    )
    .unwrap_err();
    assert!(
        matches!(
            &err,
            ProverError::VramPlan(PlanError::DoesNotFit { needed, .. }) if *needed == smallest
        ),
        "{err}"
    );
    // The smallest plan's lease proves.
    assert_proves(&cuda, &claim(smallest), &key, &spec, 1, "");
    // The failed phase closed its arena; the exact lease then works.
    let lease = claim(need);
    assert_proves(&cuda, &lease, &key, &spec, 1, "");
    // A lease without the compute slot cannot run a phase.
    let info = first_gpu();
    let vram_only = LocalLeaser::on_device(info.uuid, info.ordinal as u32);
    let vram_only = gpud_prover::lease::Leaser::acquire(
        &vram_only,
        &gpud_prover::lease::LeaseRequest::new(need, false, "normal", "test".into()),
    )
    .unwrap();
    assert!(matches!(
        prove::prove(
            &cuda,
            &vram_only,
            &key,
            spec.with_witness(1),
            Scalar::ONE,
            Scalar::ONE
        ),
        Err(ProverError::Engine { .. })
    ));
}

#[test]
#[ignore = "needs a GPU"]
fn the_pipeline_on_the_cuda_engine_verifies_every_partition_with_and_without_residency() {
    let info = first_gpu();
    for resident in [true, false] {
        let cuda = engine(resident, true);
        let (spec, key) = common::key("poseidon", 12);
        let cfg = PipelineConfig {
            seed: 5,
            // Host leases on: with the in-process leaser they are granted at once.
            host: gpud_prover::pipeline::HostLeasing::on(),
            ..common::config("poseidon", 12, 2, 3, "gpu test")
        };
        let leaser = LocalLeaser::on_device(info.uuid.clone(), info.ordinal as u32);
        let report = pipeline::run(&cuda, &leaser, &key, &cfg, &|_| {}).unwrap();
        assert!(report.all_verified, "resident {resident}");
        assert_eq!(report.engine, "cuda");
        let e = cuda.vram(&key, spec.log_size());
        if resident {
            assert_eq!(report.resident_vram_bytes, cuda.resident_bytes(&key));
            assert_eq!(report.vram_bytes, e.phase_lease(true));
        } else {
            assert_eq!(report.resident_vram_bytes, 0);
            assert_eq!(report.vram_bytes, e.phase_lease(false));
        }
        // Unloaded at the end.
        assert!(!cuda.is_resident(&key));
        for p in &report.partitions_detail {
            assert!(p.stages.msm_h > 0.0 && p.stages.total >= p.stages.h);
            // Without resident bases every query's bases are streamed in, all of them.
            let shape = key.shape();
            let g1 = (shape.h + shape.l + shape.a + shape.b_g1) as u64 * 96;
            let g2 = if cuda.g2_on_gpu(&key) {
                shape.b_g2 as u64 * 192
            } else {
                0
            };
            let streamed = if resident { 0 } else { g1 + g2 };
            assert_eq!(p.stages.bases_streamed, streamed, "resident {resident}");
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn parameters_with_g1_and_g2_on_the_gpu_equal_the_cpu_path_and_prove() {
    use gpud_prover::paramgen::{self, Backend, GpuTables, Toxic};
    let info = first_gpu();
    let device = gpud_prover::engine::process_device(&info.uuid).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for (circuit, k) in [("synthetic", 12), ("poseidon", 10)] {
        let spec = gpud_prover::CircuitSpec::parse(circuit, k).unwrap();
        let toxic = Toxic::random(&mut rng);
        let lease = claim(GpuTables::charged_bytes());
        let arena = device.reserve(&lease).unwrap();
        let gpu = {
            let tables = GpuTables::new(&arena, &toxic).unwrap();
            paramgen::generate(spec.shape(), &toxic, Backend::Gpu(&tables))
                .unwrap()
                .0
        };
        assert!(arena.ledger().peak <= GpuTables::charged_bytes());
        arena.close(&lease.compute_token().unwrap()).unwrap();
        let cpu = paramgen::generate(spec.shape(), &toxic, Backend::Cpu)
            .unwrap()
            .0;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        gpu.write(&mut a).unwrap();
        cpu.write(&mut b).unwrap();
        assert!(a == b, "{spec}: GPU parameters differ from the CPU path");
        let key = gpud_prover::ProvingKey::new("fast", gpu);
        let cuda = engine(true, false);
        let lease = claim(cuda.vram_bytes(&key, k));
        assert_proves(&cuda, &lease, &key, &spec, 1, "");
    }
}

/// Warm state given back and put back up, as a reclaim does it: the bases freed without a
/// compute lease (no phase runs) return their memory to the device, and loaded again they
/// prove as before, with no upload inside the phase.
#[test]
#[ignore = "needs a GPU"]
fn evicted_resident_bases_free_their_memory_and_prove_again_once_reloaded() {
    let cuda = engine(true, true);
    let (spec, key) = common::key("synthetic", 14);
    let bytes = cuda.resident_bytes(&key);
    assert!(bytes > 0);
    let probe = claim(0);
    let token = probe.compute_token().expect("a compute token");
    let dev = gpud_prover::engine::process_device(probe.device_uuid()).unwrap();
    let (free_before, _) = dev.mem_info(&token).unwrap();
    for round in 0..2 {
        let resident = claim(bytes);
        cuda.load_resident(&key, &resident).unwrap();
        assert!(cuda.is_resident(&key));
        let (free_loaded, _) = dev.mem_info(&token).unwrap();
        assert!(
            free_loaded + bytes / 2 <= free_before,
            "round {round}: the bases took {} of {bytes} bytes",
            free_before.saturating_sub(free_loaded)
        );
        let lease = claim(cuda.vram_bytes(&key, 14));
        assert_proves(
            &cuda,
            &lease,
            &key,
            &spec,
            round + 1,
            &format!("round {round}"),
        );
        // The reclaimer's path: no compute lease.
        cuda.unload_resident(&key, None).unwrap();
        assert!(!cuda.is_resident(&key));
        let (free_after, _) = dev.mem_info(&token).unwrap();
        assert!(
            free_after + (64 << 20) >= free_before,
            "round {round}: {} bytes not returned",
            free_before.saturating_sub(free_after)
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_quarter_of_the_unchunked_lease_still_gives_bellpersons_proof_within_the_lease() {
    // Streamed bases (no residency) and resident bases, G2 on the GPU: the phase plans within
    // a lease a quarter of the unchunked one (or the smallest plan, when that is larger), runs
    // its MSMs in chunks and still proves bit for bit.
    for resident in [false, true] {
        let cuda = engine_g2(resident, true, G2Placement::Gpu);
        let (spec, key) = common::key("synthetic", 14);
        let syn =
            prove::synthesize(&key, spec.with_witness(5), SynthesisOptions::default()).unwrap();
        let log = gpud_prover::fft::Domain::for_constraints(syn.num_constraints())
            .unwrap()
            .log_size();
        let resident_lease = claim(cuda.resident_bytes(&key));
        if resident {
            cuda.load_resident(&key, &resident_lease).unwrap();
        }
        let full = cuda.vram_bytes(&key, log);
        let bases = if resident {
            BasesAt::Resident
        } else {
            BasesAt::Host { pinned: true }
        };
        let asked = PlanInput {
            shape: key.shape(),
            log_domain: log,
            multiprocessors: first_gpu().multiprocessors,
            g2_on_gpu: true,
            bases,
            budget: full / 4,
        };
        let budget = match plan::plan(&asked) {
            Ok(p) => p.peak,
            Err(PlanError::DoesNotFit { needed, .. }) => needed,
            Err(e) => panic!("{e}"),
        };
        assert!(budget < full, "{budget} >= {full}");
        if !resident {
            // An engine told to plan for that budget asks for it.
            assert_eq!(cuda_with_budget(full / 4).vram_bytes(&key, log), budget);
        }
        let lease = claim(budget);
        let (r, s) = (Scalar::from(7u64), Scalar::from(11u64));
        let out = prove::gpu_phase(&cuda, &lease, &key, syn).unwrap();
        let t = out.timings;
        println!(
            "resident {resident}: unchunked {full} B, lease {budget} B, planned {} B, measured {} B",
            t.planned_peak, t.measured_peak
        );
        assert!(t.measured_peak <= budget, "{} > {budget}", t.measured_peak);
        assert!(t.planned_peak <= budget && t.measured_peak <= t.planned_peak);
        let inputs = out.public_inputs().to_vec();
        let ours = prove::cpu_tail(&key, out, r, s).unwrap();
        let what = format!("resident {resident}");
        assert_bellpersons_proof(&key, &spec, 5, (r, s), &ours, &inputs, &what);
        if resident {
            cuda.unload_resident(&key, Some(&lease)).unwrap();
        }
    }
}

fn cuda_with_budget(budget: u64) -> CudaEngine {
    CudaEngine::new(CudaOptions {
        resident_bases: false,
        pin_bases: true,
        g2: G2Placement::Gpu,
        vram_budget: Some(budget),
        c_on_device: true,
    })
    .expect("CUDA engine")
}

#[test]
#[ignore = "needs a GPU"]
fn auto_places_g2_by_the_speeds_calibrate_measures_under_exactly_its_lease() {
    let (_, key) = common::key("synthetic", 12);
    let e = engine(true, false);
    let vram = e
        .calibration_vram(&key)
        .expect("auto has a G2 choice to measure");
    let lease = claim(vram);
    e.calibrate(&key, &lease)
        .expect("calibrated within its own lease");
    let speeds = e.g2_speeds().expect("speeds recorded");
    println!(
        "G2 MSM of {} points: GPU {:.2} ms, CPU {:.2} ms",
        speeds.points,
        speeds.gpu_secs * 1e3,
        speeds.cpu_secs * 1e3
    );
    assert!(speeds.gpu_secs > 0.0 && speeds.cpu_secs > 0.0);
    assert_eq!(e.g2_on_gpu(&key), speeds.gpu_is_faster());
    assert_eq!(e.calibration_vram(&key), None, "measured once per process");
    // A lease one byte short of the calibration's is refused by the arena, typed.
    let fresh = engine(true, false);
    let short = claim(vram - 1);
    assert!(fresh.calibrate(&key, &short).is_err());
    assert!(fresh.g2_speeds().is_none());
}
