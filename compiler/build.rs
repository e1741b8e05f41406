//! Records the target triple kiln itself is compiled for — the machine its
//! build API and CLI run on (a build script runs on the host) — spelled the
//! way cargo and `cc` spell it, for builds outside cargo and for telling a
//! cross build (cargo's `TARGET` for the crate being built) from a native one.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // cargo always sets TARGET for a build script and reruns it when it changes.
    #[allow(clippy::disallowed_methods)]
    let target = std::env::var("TARGET").expect("cargo sets TARGET for build scripts");
    println!("cargo:rustc-env=KILN_HOST_TRIPLE={target}");
}
