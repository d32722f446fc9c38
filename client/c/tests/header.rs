//! The committed gpud.h is what cbindgen makes of the sources now (CI needs no cbindgen
//! binary: the library runs here). `GPUD_BLESS=1` rewrites it instead.

use std::path::Path;

#[test]
fn the_committed_header_is_what_cbindgen_generates() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen reads the sources");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = crate_dir.join("include/gpud.h");
    if std::env::var_os("GPUD_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write gpud.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(generated.lines().count()));
        panic!(
            "{} is stale (first difference at line {}): regenerate it with \
             `GPUD_BLESS=1 cargo test -p gpud-c --test header` and commit it",
            path.display(),
            first + 1
        );
    }
}
