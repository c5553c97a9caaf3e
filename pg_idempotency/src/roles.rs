//! Whose records a call acts on: the caller's own, unless it has the privileges of
//! `idempotency_admin` and names another owner. A grant role (`idempotency_user`,
//! `idempotency_admin`) owns none: every role granted it may `SET ROLE` to it, so its key
//! space would be all of theirs (docs/security.md, "Isolation between roles").

use pgrx::pg_sys;

use crate::error::{ErrorKind, IdemError, IdemResult};

/// The role that makes the call: outside our SECURITY DEFINER functions and the
/// application's (SET ROLE counts, SET SESSION AUTHORIZATION too).
pub fn session_role() -> pg_sys::Oid {
    // SAFETY: GetOuterUserId only reads this backend's user-id state, which InitPostgres has
    // set before any SQL function can run; it cannot raise an error.
    unsafe { pg_sys::GetOuterUserId() }
}

/// The owner of the records a call makes or acts on as its caller: the calling role,
/// refused when it is a grant role (IK006).
pub fn caller() -> IdemResult<pg_sys::Oid> {
    own_owner(session_role())
}

/// `role` as the owner of its own records: refused when it is a grant role.
fn own_owner(role: pg_sys::Oid) -> IdemResult<pg_sys::Oid> {
    if is_grant_role(role) {
        return Err(pg_idempotency_protocol::refusal::grant_role_caller(&display(role)).into());
    }
    Ok(role)
}

/// Whether `role` is one of the roles the install grants to others
/// (pg_idempotency_protocol::refusal::GRANT_ROLES).
fn is_grant_role(role: pg_sys::Oid) -> bool {
    [c"idempotency_user", c"idempotency_admin"]
        .iter()
        .any(|name| {
            // SAFETY: a 'static C string; with missing_ok the lookup returns InvalidOid instead
            // of raising (never a caller's OID). It reads the syscache, usable inside a SQL
            // function call's transaction.
            unsafe { pg_sys::get_role_oid(name.as_ptr(), true) == role }
        })
}

/// Whether `role` has the privileges of `idempotency_admin` (superusers have them).
pub fn is_admin(role: pg_sys::Oid) -> bool {
    // SAFETY: the name is a 'static C string; with missing_ok the lookup returns InvalidOid
    // instead of raising, and has_privs_of_role accepts any OID (InvalidOid is nobody's
    // member, a superuser has every role's privileges). Both read the syscache, which is
    // usable because we are inside a SQL function call, hence in a transaction.
    unsafe {
        let admin = pg_sys::get_role_oid(c"idempotency_admin".as_ptr(), true);
        pg_sys::has_privs_of_role(role, admin)
    }
}

/// A role as `regrole` prints it: its name, quoted where needed, or its OID once dropped.
pub fn display(role: pg_sys::Oid) -> String {
    // SAFETY: with noerr GetUserNameFromId returns NULL for a dropped role (checked) or a
    // NUL-terminated name palloc'd in the current memory context; quote_identifier returns
    // either that same string or a new NUL-terminated palloc'd copy. Both live until the
    // context is reset, after this function has copied the text into a Rust String. The
    // syscache lookup is valid because we are in the caller's transaction.
    unsafe {
        let name = pg_sys::GetUserNameFromId(role, true);
        if name.is_null() {
            return u32::from(role).to_string();
        }
        std::ffi::CStr::from_ptr(pg_sys::quote_identifier(name))
            .to_string_lossy()
            .into_owned()
    }
}

/// The owner whose records idem_lookup or idem_forget acts on: the caller, or the owner it
/// names when it may see every record. Decided before anything is read, so the refusal is
/// the same whether or not the named owner has a record.
/// A member of idempotency_admin naming an owner acts as the admin, so it may name any
/// owner, a grant role's records made before 0.7.0 too; its own key space is refused to a
/// grant role as every call's is.
pub fn acting_owner(named: Option<pg_sys::Oid>) -> IdemResult<pg_sys::Oid> {
    let caller = session_role();
    match named {
        None => own_owner(caller),
        Some(owner) if owner == caller => own_owner(caller),
        Some(owner) if is_admin(caller) => Ok(owner),
        Some(owner) => Err(IdemError::new(
            ErrorKind::NotPermitted,
            "only members of idempotency_admin may see or forget another role's records",
            format!(
                "The call named owner {}; the calling role is {}.",
                display(owner),
                display(caller)
            ),
            "Leave owner NULL to act on your own records, or grant idempotency_admin.",
        )),
    }
}

/// The owner whose rows a summary (idem_metrics) shows: the caller's, or None when the
/// caller may see every owner's (idempotency_admin itself too: it acts on no record).
pub fn visible_owner() -> IdemResult<Option<pg_sys::Oid>> {
    let caller = session_role();
    if is_admin(caller) {
        return Ok(None);
    }
    own_owner(caller).map(Some)
}
