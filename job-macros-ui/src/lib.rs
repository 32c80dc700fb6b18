//! No code: `tests/macro_ui.rs` holds the compile-time tests of `#[job]` (see
//! job-macros/README.md). A package of its own so that trybuild, which builds each case with
//! the package's dependencies, builds only the facade and what the cases name.
