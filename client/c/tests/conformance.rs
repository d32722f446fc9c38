//! The conformance corpus (conformance/scenarios.txt) run by the C runner
//! (conformance/runner.c) over libgpud, against a fresh `gpud --simulate` per scenario.

mod common;

use common::{Link, build_file, command, repo};

#[test]
fn the_c_runner_passes_the_conformance_corpus() {
    let corpus = repo().join("conformance/scenarios.txt");
    if !corpus.exists() {
        println!("no {}: nothing to run", corpus.display());
        return;
    }
    let runner = build_file(&repo().join("conformance/runner.c"), Link::Shared);
    let out = command(&runner)
        .arg(&corpus)
        .current_dir(repo())
        .env("GPUD_BIN", gpud_tests::bin("gpud"))
        .output()
        .expect("run the conformance runner");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the C runner failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
