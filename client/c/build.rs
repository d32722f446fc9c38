//! The shared library's soname: `libgpud.so.MAJOR`, so that programs linked against one
//! major version keep loading a newer minor one, and refuse another major.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgpud.so.{major}");
}
