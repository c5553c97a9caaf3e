//! What `#[tool]` builds from code it accepts: each case is a module of its own, compiled
//! with the workspace, and its `main` checks what the expansion made. (trybuild is left the
//! refusals, tests/ui.rs, which it only type-checks: with no case to run, it builds nothing.)

#[path = "expansions/every_member.rs"]
mod every_member;
#[path = "expansions/renamed_crate.rs"]
mod renamed_crate;

#[test]
fn every_member_lands_on_its_setting() {
    every_member::main();
}

#[test]
fn a_crate_renamed_by_its_user_is_found_through_crate_path() {
    renamed_crate::main();
}
