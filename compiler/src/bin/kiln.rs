//! The `kiln` command line.

fn main() {}
