//! The host engine: rayon FFTs and blst's multi-threaded Pippenger.

use std::time::Instant;

use gpud_client::Reservation;

use super::{Engine, G1Sums, PhaseInput, PhaseOutput, PhaseTimings};
use crate::error::Result;
use crate::fft;
use crate::msm;
use crate::params::ProvingKey;

/// Runs the GPU phase on the CPU (CI, machines without a GPU, the baseline benchmark).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuEngine;

impl Engine for CpuEngine {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn gpu_phase(
        &self,
        _lease: &dyn Reservation,
        key: &ProvingKey,
        input: PhaseInput<'_>,
    ) -> Result<PhaseOutput> {
        let PhaseInput {
            domain,
            a,
            b,
            c,
            scalars: s,
        } = input;
        let p = key.params();
        let start = Instant::now();
        let mut t = PhaseTimings::default();
        let mut lap = {
            let mut last = start;
            move || {
                let now = Instant::now();
                let d = (now - last).as_secs_f64();
                last = now;
                d
            }
        };
        let h = fft::compute_h(domain, a, b, c);
        t.h = lap();
        let h_sum = msm::g1(&p.h, &h);
        drop(h);
        t.msm_h = lap();
        let l = msm::g1(&p.l, s.aux);
        t.msm_l = lap();
        let a = msm::g1(&p.a, &s.a_query());
        t.msm_a = lap();
        let b_g1 = msm::g1(&p.b_g1, &s.b_query());
        t.msm_b = lap();
        t.total = start.elapsed().as_secs_f64();
        Ok(PhaseOutput {
            sums: G1Sums {
                h: h_sum,
                l,
                a,
                b_g1,
            },
            timings: t,
        })
    }
}
