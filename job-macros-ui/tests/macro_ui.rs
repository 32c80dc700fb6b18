//! Compile-time behaviour of `#[job]`: what it accepts (`ui/pass`, compiled and run) and the
//! error for each mistake (`ui/fail`, compared with the `.stderr` beside it).
//!
//! The snapshots depend on the compiler: see job-macros/README.md for the version they were
//! made with; `TRYBUILD=overwrite cargo test -p job-macros-ui` regenerates them.

#[test]
fn job_attribute_accepts_valid_jobs_and_explains_mistakes() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
