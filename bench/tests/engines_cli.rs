//! `gpud-bench engines`' command line: what runs without a GPU.

use std::process::Command;

fn engines(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpud-bench"))
        .arg("engines")
        .args(args)
        .output()
        .expect("gpud-bench runs")
}

#[test]
fn an_unknown_baseline_is_refused_naming_the_choices() {
    let out = engines(&["--baseline", "gpu"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--baseline"), "{err}");
    assert!(err.contains("bellperson") && err.contains("none"), "{err}");
}

#[test]
fn the_help_names_the_baseline_and_its_default_for_this_build() {
    let out = engines(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--baseline <BASELINE>"), "{help}");
    let default = if gpud_bench::bellperson_prover::GPU_BUILD {
        "[default: bellperson]"
    } else {
        "[default: none]"
    };
    assert!(help.contains(default), "{help}");
}

/// `gpud-bench partition --budget` takes the sizes every gpud tool takes (`16GiB`) and refuses
/// anything else before looking for a GPU.
#[test]
fn partition_budgets_are_sizes_and_a_bad_one_is_refused_by_name() {
    let run = |budget: &str| {
        Command::new(env!("CARGO_BIN_EXE_gpud-bench"))
            .args(["partition", "--log-size", "10", "--budget", budget])
            .output()
            .expect("gpud-bench runs")
    };
    let bad = run("16XB");
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--budget") && err.contains("16XB"), "{err}");
    // A good size gets past the arguments (and then needs a GPU, which CI lacks, or runs).
    let good = run("16GiB");
    let err = String::from_utf8_lossy(&good.stderr);
    assert!(!err.contains("--budget"), "{err}");
}
