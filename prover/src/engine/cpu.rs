//! The host engine: rayon FFTs and blst's multi-threaded Pippenger.

use blstrs::Scalar;
use gpud_client::Reservation;

use super::{Engine, G1Scalars, G1Sums};
use crate::error::Result;
use crate::fft::{self, Domain};
use crate::msm;
use crate::params::ProvingKey;

/// Runs the GPU phase on the CPU (CI, machines without a GPU, the baseline benchmark).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuEngine;

impl Engine for CpuEngine {
    type H = Vec<Scalar>;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn compute_h(
        &self,
        _lease: &dyn Reservation,
        _key: &ProvingKey,
        domain: &Domain,
        a: Vec<Scalar>,
        b: Vec<Scalar>,
        c: Vec<Scalar>,
    ) -> Result<Self::H> {
        Ok(fft::compute_h(domain, a, b, c))
    }

    fn g1_msms(
        &self,
        _lease: &dyn Reservation,
        key: &ProvingKey,
        h: Self::H,
        s: G1Scalars<'_>,
    ) -> Result<G1Sums> {
        let p = key.params();
        let n_in = s.input.len();
        let b_in = s.b_input_density.count();
        let h_sum = msm::g1(&p.h, &h);
        drop(h);
        let l = msm::g1(&p.l, s.aux);
        let a =
            msm::g1(&p.a[..n_in], s.input) + msm::g1(&p.a[n_in..], &s.a_aux_density.select(s.aux));
        let b_g1 = msm::g1(&p.b_g1[..b_in], &s.b_input_density.select(s.input))
            + msm::g1(&p.b_g1[b_in..], &s.b_aux_density.select(s.aux));
        Ok(G1Sums {
            h: h_sum,
            l,
            a,
            b_g1,
        })
    }
}
