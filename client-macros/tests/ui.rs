//! What `#[tool]` refuses, with which words: each refusal's `.stderr` is the message a user
//! sees. Regenerate them with `TRYBUILD=overwrite` after a deliberate change of wording, and
//! read the diff. What it accepts is tests/expansions.rs (compiled with the workspace: a
//! trybuild case that passes would make trybuild build the client and its dependencies in a
//! target of its own, about a minute and a half; refusals only need `cargo check`).

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/fail/*.rs");
}
