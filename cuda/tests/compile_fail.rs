//! The lease rules of the device layer are kept by the compiler: each file in `compile_fail/`
//! is a misuse that must not compile, with the compiler's message committed next to it
//! (`.stderr`). trybuild only compiles, so this runs without a GPU.
//!
//! To refresh the messages after a deliberate change (a new compiler wording): run once with
//! `TRYBUILD=overwrite`, then read the diff.

#[test]
fn misuses_of_the_lease_rules_do_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/*.rs");
}
