//! Host-side constants of the transforms, computed with blstrs: roots of unity, the coset shift,
//! 1/n, 1/Z(g), and the two-level power tables the kernels read.

use blstrs::Scalar;
use ff::{Field, PrimeField};

use super::plan::{Base, Factor, TableKey};

/// Exponent bits of each level of a power table (ntt.cuh: NTT_POW_*_BITS).
pub const POW_LEVEL_BITS: [u32; 2] = [14, 13];
/// Entries of a power table (768 KiB: stays in L2).
pub const POW_TABLE_LEN: usize = (1 << 14) + (1 << 13);

/// The primitive 2^log_n-th root of unity bellperson uses: ROOT_OF_UNITY squared down.
pub fn omega(log_n: u32) -> Scalar {
    let mut w = Scalar::ROOT_OF_UNITY;
    for _ in log_n..Scalar::S {
        w = w.square();
    }
    w
}

/// The coset shift g (bellperson: `F::MULTIPLICATIVE_GENERATOR`).
pub fn coset_gen() -> Scalar {
    Scalar::MULTIPLICATIVE_GENERATOR
}

fn invert(x: Scalar) -> Scalar {
    // The values inverted here (n, g, g^n - 1) are never zero for n <= 2^32.
    Option::from(x.invert()).unwrap_or(Scalar::ZERO)
}

/// 1/n.
pub fn inv_n(log_n: u32) -> Scalar {
    invert(Scalar::from(1u64 << log_n))
}

/// 1/Z(g) with Z(x) = x^n - 1: the division by Z on the coset.
pub fn inv_z_on_coset(log_n: u32) -> Scalar {
    invert(coset_gen().pow_vartime([1u64 << log_n]) - Scalar::ONE)
}

fn base_value(log_n: u32, base: Base) -> Scalar {
    match base {
        Base::Omega => omega(log_n),
        Base::Gen => coset_gen(),
        Base::GenInv => invert(coset_gen()),
        Base::One => Scalar::ONE,
    }
}

fn factor_value(log_n: u32, factor: Factor) -> Scalar {
    match factor {
        Factor::One => Scalar::ONE,
        Factor::InvN => inv_n(log_n),
        Factor::InvNInvZ => inv_n(log_n) * inv_z_on_coset(log_n),
    }
}

/// factor * base^e for e < 2^27 as lo[e mod 2^14] * hi[e >> 14].
pub fn power_table(base: Scalar, factor: Scalar) -> Vec<Scalar> {
    let mut out = Vec::with_capacity(POW_TABLE_LEN);
    // base^(2^(bits of the levels below)): the step between entries of this level.
    let mut step = base;
    for (level, bits) in POW_LEVEL_BITS.iter().enumerate() {
        let mut acc = if level + 1 == POW_LEVEL_BITS.len() {
            factor
        } else {
            Scalar::ONE
        };
        for _ in 0..(1u32 << bits) {
            out.push(acc);
            acc *= step;
        }
        step = step.pow_vartime([1u64 << bits]);
    }
    out
}

/// The contents of a `TableKey::Powers` table.
pub fn powers_for(key: TableKey) -> Option<Vec<Scalar>> {
    match key {
        TableKey::Powers {
            log_n,
            base,
            factor,
        } => Some(power_table(
            base_value(log_n, base),
            factor_value(log_n, factor),
        )),
        TableKey::Twiddles { .. } => None,
    }
}

/// Entries of the twiddle table of 2^log_n points: omega^e for e < n/2.
pub fn twiddle_count(log_n: u32) -> u64 {
    1u64 << (log_n - 1)
}

/// The power table a twiddle table is expanded from (omega_n^e).
pub fn twiddle_source(log_n: u32) -> TableKey {
    TableKey::Powers {
        log_n,
        base: Base::Omega,
        factor: Factor::One,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(t: &[Scalar], e: u64) -> Scalar {
        t[(e & 16383) as usize] * t[16384 + (e >> 14) as usize]
    }

    #[test]
    fn power_tables_give_factor_times_base_to_the_e() {
        let b = Scalar::from(5u64);
        let c = Scalar::from(11u64);
        let t = power_table(b, c);
        assert_eq!(t.len(), POW_TABLE_LEN);
        for e in [
            0u64,
            1,
            1023,
            1024,
            1025,
            (1 << 20) - 1,
            1 << 20,
            (1 << 27) - 1,
            123_456_789,
        ] {
            assert_eq!(lookup(&t, e), c * b.pow_vartime([e]), "e = {e}");
        }
    }

    #[test]
    fn omega_has_the_right_order() {
        for l in [1u32, 2, 10, 27] {
            let w = omega(l);
            assert_eq!(w.pow_vartime([1u64 << l]), Scalar::ONE);
            assert_ne!(w.pow_vartime([1u64 << (l - 1)]), Scalar::ONE);
        }
    }
}
