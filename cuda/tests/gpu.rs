//! GPU tests: run with `--ignored` on a machine with an NVIDIA GPU (gpu/run-suite.sh does).
//! Without a GPU they are skipped visibly (ignored, with the reason).
//!
//! Each test claims the first device alone (`ExclusiveDevice`) with a budget that it sets.

use blstrs::Scalar;
use ff::Field;
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_cuda::hpoly::HPoly;
use gpud_cuda::ntt::NttEngine;
use gpud_cuda::ntt::plan::NttKind;
use gpud_cuda::pinned::is_pinned;
use gpud_cuda::{Device, Error, PinnedBuffer, RegisteredVec, cpu, driver};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

const MIB: u64 = 1 << 20;

fn claim(vram: u64) -> ExclusiveDevice {
    let info = driver::list_devices()
        .expect("CUDA driver")
        .into_iter()
        .next()
        .expect("a GPU");
    ExclusiveDevice::assume_unshared(info.uuid, info.ordinal as u32, vram)
}

fn fresh_rng() -> ChaCha20Rng {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    println!("seed {seed}");
    ChaCha20Rng::seed_from_u64(seed)
}

fn random(rng: &mut ChaCha20Rng, n: usize) -> Vec<Scalar> {
    (0..n).map(|_| Scalar::random(&mut *rng)).collect()
}

#[test]
#[ignore = "needs a GPU"]
fn ntt_kinds_and_batches_match_the_cpu_bit_for_bit() {
    let lease = claim(4096 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut ntt = NttEngine::new(&dev).unwrap();
    let mut rng = fresh_rng();
    for log_n in 1..=20u32 {
        let batch = if log_n <= 12 { 3 } else { 1 };
        for kind in [
            NttKind::Forward,
            NttKind::Inverse,
            NttKind::CosetForward,
            NttKind::CosetInverse,
        ] {
            let x = random(&mut rng, batch << log_n);
            let mut buf = dev.alloc::<Scalar>(x.len()).unwrap();
            buf.copy_from_host(&x).unwrap();
            ntt.run(&mut buf, kind, log_n).unwrap();
            let got = buf.to_vec().unwrap();
            let mut want = x;
            cpu::ntt(&mut want, kind, log_n).unwrap();
            assert!(
                got == want,
                "{kind:?} 2^{log_n} x {batch} differs from the CPU"
            );
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn h_matches_the_cpu_from_pageable_and_pinned_memory() {
    let lease = claim(8192 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut h = HPoly::new(&dev).unwrap();
    let mut rng = fresh_rng();
    for log_n in [1u32, 2, 3, 5, 10, 13, 16, 18] {
        let n = 1usize << log_n;
        let len = if n > 4 { n - 1 } else { n };
        let (a, b, c) = (
            random(&mut rng, len),
            random(&mut rng, len),
            random(&mut rng, len),
        );
        let want = cpu::h_poly(&a, &b, &c).unwrap();
        // Ordinary memory.
        let out = h.compute(&a, &b, &c).unwrap();
        let mut got = vec![Scalar::ZERO; n];
        out.download_into(&mut got).unwrap();
        assert!(got == want, "H 2^{log_n} (pageable) differs from the CPU");
        drop(out);
        // Page-locked memory, downloaded into page-locked memory.
        let mut pins = [0, 1, 2].map(|_| PinnedBuffer::<Scalar>::zeroed(&dev, len).unwrap());
        for (p, src) in pins.iter_mut().zip([&a, &b, &c]) {
            p.copy_from_slice(src);
        }
        assert!(gpud_cuda::pinned::is_pinned(&pins[0]));
        let out = h.compute(&pins[0], &pins[1], &pins[2]).unwrap();
        let mut dst = PinnedBuffer::<Scalar>::zeroed(&dev, n).unwrap();
        out.download_into(&mut dst).unwrap();
        assert!(
            dst[..] == want[..],
            "H 2^{log_n} (pinned) differs from the CPU"
        );
    }
}

/// C derived on the device (`c = a · b`) gives the H of the uploaded `a · b`, and the split
/// path (buffers, copies from another thread while the main stream computes, transforms)
/// gives the same as the one-call path, for C uploaded or derived.
#[test]
#[ignore = "needs a GPU"]
fn h_with_c_derived_on_the_device_and_split_uploads_match_the_cpu() {
    use gpud_cuda::hpoly::CSource;
    let lease = claim(8192 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut h = HPoly::new(&dev).unwrap();
    let mut rng = fresh_rng();
    for log_n in [1u32, 2, 3, 5, 10, 13, 16, 18] {
        let n = 1usize << log_n;
        let len = if n > 4 { n - 3 } else { n };
        let (a, b) = (random(&mut rng, len), random(&mut rng, len));
        let c: Vec<Scalar> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
        let want = cpu::h_poly(&a, &b, &c).unwrap();
        let got = |out: gpud_cuda::hpoly::HOutput<'_>| {
            let mut v = vec![Scalar::ZERO; n];
            out.download_into(&mut v).unwrap();
            v
        };
        let derived = h.compute_with(&a, &b, CSource::ProductOfAB).unwrap();
        assert!(got(derived) == want, "H 2^{log_n}, C derived");
        for c_src in [CSource::Host(&c[..]), CSource::ProductOfAB] {
            let mut inputs = h.inputs(len).unwrap();
            // Work on the main stream while another thread copies.
            let mut busy = dev.alloc::<Scalar>(1 << 16).unwrap();
            busy.copy_from_host(&random(&mut rng, 1 << 16)).unwrap();
            std::thread::scope(|s| {
                let up = s.spawn(|| h.upload(&mut inputs, &a, &b, c_src));
                let mut ntt = gpud_cuda::ntt::NttEngine::new(&dev).unwrap();
                for _ in 0..4 {
                    ntt.run(&mut busy, gpud_cuda::ntt::plan::NttKind::Forward, 16)
                        .unwrap();
                }
                up.join().unwrap().unwrap();
            });
            let out = h.transform(inputs).unwrap();
            assert!(got(out) == want, "H 2^{log_n}, split, {c_src:?}");
        }
        // Lengths that disagree are refused before anything is copied.
        let mut inputs = h.inputs(len).unwrap();
        let err = h.upload(&mut inputs, &a, &b[..len - 1], CSource::ProductOfAB);
        assert!(err.is_err(), "a shorter b was accepted");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_registered_vector_is_page_locked_until_dropped_and_copies_from_it_are_exact() {
    let lease = claim(256 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let data = std::sync::Arc::new(random(&mut fresh_rng(), 1 << 16));
    assert!(!is_pinned(&data));
    let reg = RegisteredVec::register(&device, std::sync::Arc::clone(&data)).unwrap();
    assert!(is_pinned(&data));
    assert_eq!(reg.bytes(), 32 << 16);
    // The same memory again is refused, typed, and the first registration stands.
    let again = RegisteredVec::register(&device, std::sync::Arc::clone(&data));
    assert!(matches!(again, Err(Error::Driver(_))), "{again:?}");
    assert!(is_pinned(&data));
    let mut buf = dev.alloc::<Scalar>(data.len()).unwrap();
    buf.copy_from_host(&reg).unwrap();
    assert!(buf.to_vec().unwrap() == *data);
    drop(buf);
    drop(reg);
    assert!(!is_pinned(&data), "unregistered when dropped");
    let empty = RegisteredVec::register(&device, std::sync::Arc::new(Vec::<Scalar>::new()));
    assert!(matches!(empty, Err(Error::InvalidArgument(_))), "{empty:?}");
}

#[test]
#[ignore = "needs a GPU"]
fn an_allocation_past_the_reservation_fails_typed_and_the_device_stays_usable() {
    let lease = claim(64 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let first = dev.alloc::<u8>(40 << 20).unwrap();
    let pool_before = dev.pool_usage().unwrap();
    match dev.alloc::<u8>(30 << 20) {
        Err(Error::OverReservation {
            requested,
            in_use,
            reserved,
        }) => {
            assert_eq!(
                (requested, in_use, reserved),
                (30 * MIB, 40 * MIB, 64 * MIB)
            );
        }
        other => panic!("expected OverReservation, got {other:?}"),
    }
    // CUDA was not asked: the pool did not grow.
    assert_eq!(dev.pool_usage().unwrap().reserved, pool_before.reserved);
    drop(first);
    // Still usable: an NTT within the budget runs and is right.
    let mut ntt = NttEngine::new(&dev).unwrap();
    let mut rng = fresh_rng();
    let x = random(&mut rng, 1 << 12);
    let mut buf = dev.alloc::<Scalar>(x.len()).unwrap();
    buf.copy_from_host(&x).unwrap();
    ntt.run(&mut buf, NttKind::Forward, 12).unwrap();
    let mut want = x;
    cpu::ntt(&mut want, NttKind::Forward, 12).unwrap();
    assert!(buf.to_vec().unwrap() == want);
    drop((buf, ntt));
    let token = lease
        .compute_token()
        .expect("exclusive devices hold the compute slot");
    let usage = dev.close(&token).unwrap();
    assert_eq!(usage.reserved, 0, "the pool returned all its memory");
}

#[test]
#[ignore = "needs a GPU"]
fn shrinking_is_refused_while_allocated_and_returns_memory_after() {
    let lease = claim(256 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let token = lease.compute_token().unwrap();
    let a = dev.alloc::<u8>(100 << 20).unwrap();
    assert!(matches!(
        dev.resize(64 * MIB, &token),
        Err(Error::StillAllocated { .. })
    ));
    drop(a);
    let usage = dev.resize(64 * MIB, &token).unwrap();
    assert!(
        usage.reserved <= 64 * MIB,
        "pool still holds {} bytes",
        usage.reserved
    );
    assert!(matches!(
        dev.alloc::<u8>(100 << 20),
        Err(Error::OverReservation { .. })
    ));
    dev.resize(512 * MIB, &token).unwrap();
    drop(dev.alloc::<u8>(100 << 20).unwrap());
    dev.close(&token).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn a_token_of_another_device_is_refused_and_unknown_devices_are_errors() {
    let lease = claim(64 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let other = ExclusiveDevice::assume_unshared("GPU-00000000-0000-0000-0000-000000000000", 0, 0);
    let wrong = other.compute_token().unwrap();
    assert!(matches!(
        dev.synchronize(&wrong),
        Err(Error::WrongToken { .. })
    ));
    assert!(matches!(dev.trim(0, &wrong), Err(Error::WrongToken { .. })));
    assert!(matches!(
        Device::open(other.device_uuid()),
        Err(Error::DeviceNotFound { .. })
    ));
    // A lease of another device cannot become an arena here.
    assert!(matches!(
        device.reserve(&other),
        Err(Error::WrongDevice { .. })
    ));
    let token = lease.compute_token().unwrap();
    let (free, total) = dev.mem_info(&token).unwrap();
    assert!(free <= total && total > 0);
    dev.close(&token).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn arenas_of_one_device_have_separate_budgets_and_close_under_any_compute_token_of_it() {
    // One context for the process; a VRAM-only lease (resident data) and a compute lease
    // (working memory) become two arenas with their own budgets and pools.
    let info = driver::list_devices().unwrap().remove(0);
    let device = Device::open(&info.uuid).unwrap();
    let resident_lease =
        ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, 64 * MIB);
    let phase_lease =
        ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, 32 * MIB);
    let resident = device.reserve(&resident_lease).unwrap();
    let keep = resident.alloc::<u8>(60 << 20).unwrap();
    {
        let phase = device.reserve(&phase_lease).unwrap();
        // The resident arena's 60 MiB do not count against the phase arena's 32 MiB...
        let work = phase.alloc::<u8>(30 << 20).unwrap();
        assert!(matches!(
            phase.alloc::<u8>(4 << 20),
            Err(Error::OverReservation { .. })
        ));
        // ...and vice versa.
        assert!(matches!(
            resident.alloc::<u8>(6 << 20),
            Err(Error::OverReservation { .. })
        ));
        assert_eq!(resident.ledger().in_use, 60 * MIB);
        assert_eq!(phase.ledger().in_use, 30 * MIB);
        drop(work);
        let token = phase_lease.compute_token().unwrap();
        let usage = phase.close(&token).unwrap();
        assert_eq!(usage.reserved, 0);
    }
    // The resident data survived the phase arena; an NTT over it in a new phase still works.
    assert_eq!(resident.pool_usage().unwrap().used, 60 * MIB);
    drop(keep);
    // The resident (VRAM-only) arena is closed under the compute lease's token.
    let token = phase_lease.compute_token().unwrap();
    assert_eq!(resident.close(&token).unwrap().reserved, 0);
}

#[test]
#[ignore = "needs a GPU"]
fn h_fits_in_exactly_its_charged_bytes() {
    let info = driver::list_devices().unwrap().remove(0);
    let device = Device::open(&info.uuid).unwrap();
    let mut rng = fresh_rng();
    for len in [2usize, 5, 1000, (1 << 16) - 3, 1 << 18] {
        let need = gpud_cuda::hpoly::charged_bytes(len).unwrap();
        let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, need);
        let arena = device.reserve(&lease).unwrap();
        let mut h = HPoly::new(&arena).unwrap();
        let (a, b, c) = (
            random(&mut rng, len),
            random(&mut rng, len),
            random(&mut rng, len),
        );
        let out = h.compute(&a, &b, &c).unwrap();
        let mut got = vec![Scalar::ZERO; len.next_power_of_two()];
        out.download_into(&mut got).unwrap();
        assert!(got == cpu::h_poly(&a, &b, &c).unwrap(), "len {len}");
        assert!(arena.ledger().peak <= need, "len {len}");
        drop(out);
        // C derived on the device needs no more.
        let ab: Vec<Scalar> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
        let out = h
            .compute_with(&a, &b, gpud_cuda::hpoly::CSource::ProductOfAB)
            .unwrap();
        out.download_into(&mut got).unwrap();
        assert!(
            got == cpu::h_poly(&a, &b, &ab).unwrap(),
            "len {len}, C derived"
        );
        assert!(arena.ledger().peak <= need, "len {len}, C derived");
        drop((out, h));
        arena.close(&lease.compute_token().unwrap()).unwrap();
    }
}

/// `k · G` on the GPU against blstrs in one group: more than one chunk (both page-locked slots
/// reused), zeros (infinity) inside and at the ends of batches and chunks, ones and -1 among
/// random scalars; the lease's peak within `charged_bytes`.
fn fixed_base_check<C>(g: C::Projective)
where
    C: gpud_cuda::fixed_base::FixedBaseCurve,
    C::Projective:
        group::Curve<AffineRepr = C::Affine> + std::ops::Mul<Scalar, Output = C::Projective>,
    C::Affine: Default + Clone + Send + Sync + PartialEq,
{
    use gpud_cuda::fixed_base::{CHUNK, FixedBase};
    use group::Curve;
    let info = driver::list_devices().unwrap().remove(0);
    let device = Device::open(&info.uuid).unwrap();
    let bytes = FixedBase::<C>::charged_bytes();
    let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, bytes);
    let arena = device.reserve(&lease).unwrap();
    let mut rng = fresh_rng();
    let fb = FixedBase::<C>::new(&arena, &g).unwrap();
    let n = 2 * CHUNK + 1001;
    let mut s: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
    let zeros = [0, 5, 6, 7, 13, CHUNK - 1, CHUNK, 2 * CHUNK + 3, n - 1];
    for i in zeros {
        s[i] = Scalar::ZERO;
    }
    s[1] = Scalar::ONE;
    s[2] = -Scalar::ONE;
    let mut out = vec![C::Affine::default(); n];
    fb.mul(&s, &mut out).unwrap();
    assert!(arena.ledger().peak <= bytes);
    // Spot checks everywhere (a full check of 4M points on the CPU would take minutes).
    for i in (0..n).step_by(997).chain(0..16).chain(zeros).chain([
        CHUNK + 1,
        2 * CHUNK - 1,
        2 * CHUNK,
        n - 2,
    ]) {
        assert!(out[i] == (g * s[i]).to_affine(), "{}: scalar {i}", C::NAME);
    }
    drop(fb);
    arena.close(&lease.compute_token().unwrap()).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn fixed_base_multiplication_matches_blstrs_in_g1_and_g2() {
    use blstrs::{G1Projective, G2Projective};
    use group::Group;
    let mut rng = fresh_rng();
    fixed_base_check::<gpud_cuda::msm::G1>(G1Projective::generator() * Scalar::random(&mut rng));
    fixed_base_check::<gpud_cuda::msm::G2>(G2Projective::generator() * Scalar::random(&mut rng));
}
