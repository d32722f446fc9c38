//! The host engine: rayon FFTs and blst's multi-threaded Pippenger.

use std::time::Instant;

use gpud_client::Reservation;

use super::{Engine, G1Sums, HeldLease, PhaseInput, PhaseLease, PhaseOutput, PhaseTimings};
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
        lease: &dyn Reservation,
        key: &ProvingKey,
        input: PhaseInput<'_>,
    ) -> Result<PhaseOutput> {
        self.gpu_phase_with_safe_points(&mut HeldLease(lease), key, input)
    }

    /// Every step's data is in host memory: each step boundary is a safe point. The time spent
    /// without the lease (a yield) is not part of any step's timing.
    fn gpu_phase_with_safe_points(
        &self,
        lease: &mut dyn PhaseLease,
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
        let mut yielded = 0.0;
        let mut safe_point = |after: &'static str, lap: &mut dyn FnMut() -> f64| -> Result<()> {
            lease.safe_point(after)?;
            yielded += lap();
            Ok(())
        };
        // An assignment synthesized without C (not kept): its evaluations are a · b.
        let c = if c.is_empty() && !a.is_empty() {
            use rayon::prelude::*;
            a.par_iter().zip(b.par_iter()).map(|(x, y)| x * y).collect()
        } else {
            c
        };
        let h = fft::compute_h(domain, a, b, c);
        t.h = lap();
        safe_point("H polynomial", &mut lap)?;
        let h_sum = msm::g1(&p.h, &h);
        drop(h);
        t.msm_h = lap();
        safe_point("H MSM", &mut lap)?;
        let l = msm::g1(&p.l, s.aux);
        t.msm_l = lap();
        safe_point("L MSM", &mut lap)?;
        let a = msm::g1(&p.a, &s.a_query());
        t.msm_a = lap();
        safe_point("A MSM", &mut lap)?;
        let b_g1 = msm::g1(&p.b_g1, &s.b_query());
        t.msm_b = lap();
        t.total = start.elapsed().as_secs_f64() - yielded;
        Ok(PhaseOutput {
            sums: G1Sums {
                h: h_sum,
                l,
                a,
                b_g1,
            },
            b_g2: None,
            timings: t,
        })
    }
}
