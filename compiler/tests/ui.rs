//! Compile-time errors of the proc-macros, each pointing at the user's token
//! (`.stderr` snapshots next to each case; bless with TRYBUILD=overwrite).
//! The snapshots are rustc's output, so they are checked on the toolchain the
//! project is built with (see README).

#[test]
fn macro_errors_point_at_the_offending_token() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
