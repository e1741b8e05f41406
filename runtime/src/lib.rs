//! `kiln-runtime`: what a binary with a kiln-compiled model links at run time.
//!
//! Not written yet: see the build-script issue. `no_std` by default.
#![no_std]
