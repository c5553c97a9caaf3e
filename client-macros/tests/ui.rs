//! What `#[tool]` accepts, and what it refuses with which words: each refusal's `.stderr`
//! is the message a user sees. Regenerate them with `TRYBUILD=overwrite` after a deliberate
//! change of wording, and read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
