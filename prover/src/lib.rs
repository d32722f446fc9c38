//! Groth16 prover.
