//! gpud's bellperson constraint systems written once: each says only what it does with a
//! variable and a constraint ([`Record`]), and [`constraint_system!`](crate::constraint_system)
//! writes bellperson's `ConstraintSystem` impl around it (no namespaces, its own root).

use bellperson::{LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;

/// A result of a constraint-system call, as bellperson's trait returns it.
pub type CsResult<T> = std::result::Result<T, SynthesisError>;

/// A linear combination over the scalar field.
pub type Lc = LinearCombination<Scalar>;

/// What a constraint system does with the circuit's calls; names (annotations, namespaces)
/// are never asked for.
pub trait Record {
    /// A new aux variable, whose value `value` computes (called or not, as the system needs).
    fn aux(&mut self, value: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable>;
    /// A new public input, whose value `value` computes.
    fn input(&mut self, value: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable>;
    /// The constraint `a · b = c`, each side built from the zero combination (or not built).
    fn constraint(
        &mut self,
        a: impl FnOnce(Lc) -> Lc,
        b: impl FnOnce(Lc) -> Lc,
        c: impl FnOnce(Lc) -> Lc,
    );
}

/// The names [`constraint_system!`](crate::constraint_system) expands to, so that a crate using
/// it needs no bellperson or blstrs of its own.
#[doc(hidden)]
pub mod __private {
    pub use bellperson::{ConstraintSystem, Variable};
    pub use blstrs::Scalar;
}

/// Implements bellperson's `ConstraintSystem<Scalar>` for a type that implements [`Record`]:
/// annotations dropped, namespaces ignored, the system its own root.
#[macro_export]
macro_rules! constraint_system {
    ($ty:ty) => {
        impl $crate::cs::__private::ConstraintSystem<$crate::cs::__private::Scalar> for $ty {
            type Root = Self;

            $crate::constraint_system!(@alloc alloc => aux);
            $crate::constraint_system!(@alloc alloc_input => input);

            fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, c: LC)
            where
                A: FnOnce() -> AR,
                AR: Into<String>,
                LA: FnOnce($crate::cs::Lc) -> $crate::cs::Lc,
                LB: FnOnce($crate::cs::Lc) -> $crate::cs::Lc,
                LC: FnOnce($crate::cs::Lc) -> $crate::cs::Lc,
            {
                $crate::cs::Record::constraint(self, a, b, c)
            }

            fn push_namespace<NR, N>(&mut self, _: N)
            where
                NR: Into<String>,
                N: FnOnce() -> NR,
            {
            }

            fn pop_namespace(&mut self) {}

            fn get_root(&mut self) -> &mut Self::Root {
                self
            }
        }
    };
    // `alloc` and `alloc_input`: the same signature, forwarded to `Record::$record`.
    (@alloc $name:ident => $record:ident) => {
        fn $name<F, A, AR>(
            &mut self,
            _: A,
            f: F,
        ) -> $crate::cs::CsResult<$crate::cs::__private::Variable>
        where
            F: FnOnce() -> $crate::cs::CsResult<$crate::cs::__private::Scalar>,
            A: FnOnce() -> AR,
            AR: Into<String>,
        {
            $crate::cs::Record::$record(self, f)
        }
    };
}
