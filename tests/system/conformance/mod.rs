//! The conformance corpus (`conformance/scenarios.txt`, format in `conformance/README.md`), run
//! with the Rust client against a real `gpud --simulate` per scenario. The C, Go and Python
//! clients run the same corpus with their own runners.
//!
//! `GPUD_CONFORMANCE=name,name` runs only the named scenarios.

mod corpus;
mod run;

use std::path::Path;

/// The corpus file, from the repository root.
fn corpus_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/scenarios.txt")
}

#[test]
fn every_scenario_of_the_corpus_passes_with_the_rust_client() {
    let path = corpus_path();
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let scenarios = corpus::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let only: Option<Vec<String>> = std::env::var("GPUD_CONFORMANCE")
        .ok()
        .map(|v| v.split(',').map(String::from).collect());
    let mut failures = Vec::new();
    let mut ran = 0;
    for scenario in &scenarios {
        if only.as_ref().is_some_and(|o| !o.contains(&scenario.name)) {
            continue;
        }
        ran += 1;
        let mut run = run::Run::start(scenario);
        for step in &scenario.steps {
            if let Err(why) = run.step(step) {
                let log = run.log();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                failures.push(format!(
                    "{}:{}: scenario {}: `{}`: {why}\n  daemon log (last lines):\n    {}",
                    path.display(),
                    step.line,
                    scenario.name,
                    step.text,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n    ")
                ));
                break;
            }
        }
        println!("conformance: {} done", scenario.name);
    }
    assert!(ran > 0, "no scenario ran (GPUD_CONFORMANCE={only:?})");
    assert!(
        failures.is_empty(),
        "{} of {ran} scenarios failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("conformance: {ran} scenarios passed");
}
