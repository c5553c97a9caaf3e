//! The identity rule (DESIGN 7, 0.2.0): the owner of a record is the OUTER calling role:
//! the session's current role, `SET ROLE` included; not the definer of our SECURITY DEFINER
//! functions nor of an application's own wrapper. The rule is a table: each row says how a
//! call is made, whose record it creates, and who sees that record through idem_lookup.
//! The rules for naming another owner (idempotency_admin) follow the table. The table's
//! last row, a call made as a grant role (refused, IK006), is grant_roles.rs; its column
//! for a PL/Proxy proxy is tests/tests/sharding/identity.rs.

use pg_idempotency_tests::attack::TestRole;
use pg_idempotency_tests::*;
use std::collections::HashMap;

/// The roles the table speaks of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Who {
    /// A login role in idempotency_user and in Group.
    Login,
    /// A group role in idempotency_user.
    Group,
    /// Another member of Group, not itself in idempotency_user.
    Member,
    /// Owns the application's SECURITY DEFINER wrapper; in idempotency_user.
    WrapperOwner,
    /// May only call the wrapper: not in idempotency_user.
    Caller,
    /// A role a superuser becomes with SET SESSION AUTHORIZATION.
    Authorized,
    /// Granted idempotency_admin.
    Admin,
    /// Named with capitals, spaces and a double quote.
    Odd,
}

/// How a session starts: as the suite's superuser, or logged in as a role.
#[derive(Clone, Copy, Debug)]
enum Session {
    Superuser,
    Login(Who),
}

/// What a session runs before its call.
#[derive(Clone, Copy, Debug)]
enum Prelude {
    SetRole(Who),
    ResetRole,
    SessionAuthorization(Who),
}

/// How the call is made.
#[derive(Clone, Copy, Debug)]
enum Call {
    /// `idem_begin` itself.
    Direct,
    /// The application's SECURITY DEFINER wrapper `<app>.claim(scope, key)`.
    Wrapper,
}

/// Who looks the record up with `idem_lookup(scope, key)` (owner left NULL).
#[derive(Clone, Debug)]
enum Viewer {
    /// A new session, after its preludes.
    Fresh(Session, Vec<Prelude>),
    /// The session that made the row's calls, after all of them.
    ThisSession,
    /// A new session of this role, through the wrapper's `<app>.owner_of(scope, key)`.
    Wrapper(Who),
}

/// One call of a row: what runs before it, how it is made, whose record it creates.
struct Step {
    prelude: Vec<Prelude>,
    call: Call,
    owner: Who,
    seen_by: Vec<Viewer>,
    unseen_by: Vec<Viewer>,
}

struct Row {
    case: &'static str,
    session: Session,
    steps: Vec<Step>,
}

fn step(prelude: Vec<Prelude>, owner: Who, seen_by: Vec<Viewer>, unseen_by: Vec<Viewer>) -> Step {
    Step {
        prelude,
        call: Call::Direct,
        owner,
        seen_by,
        unseen_by,
    }
}

fn fresh(who: Who) -> Viewer {
    Viewer::Fresh(Session::Login(who), vec![])
}

fn fresh_as(session: Session, prelude: Vec<Prelude>) -> Viewer {
    Viewer::Fresh(session, prelude)
}

fn table() -> Vec<Row> {
    use Prelude::*;
    use Who::*;
    vec![
        Row {
            case: "(1) a login role calling directly",
            session: Session::Login(Login),
            steps: vec![step(
                vec![],
                Login,
                vec![fresh(Login)],
                vec![fresh(Authorized), fresh_as(Session::Superuser, vec![])],
            )],
        },
        Row {
            case: "(2) SET ROLE to a group it is a member of, then RESET ROLE",
            session: Session::Login(Login),
            steps: vec![
                step(
                    vec![SetRole(Group)],
                    Group,
                    // Any session SET ROLE'd to the group.
                    vec![
                        fresh_as(Session::Login(Login), vec![SetRole(Group)]),
                        fresh_as(Session::Login(Member), vec![SetRole(Group)]),
                        fresh_as(Session::Superuser, vec![SetRole(Group)]),
                    ],
                    // Not the login role once it has RESET ROLE.
                    vec![
                        Viewer::ThisSession,
                        fresh(Login),
                        fresh_as(Session::Login(Login), vec![SetRole(Group), ResetRole]),
                    ],
                ),
                step(
                    vec![ResetRole],
                    Login,
                    vec![Viewer::ThisSession, fresh(Login)],
                    vec![fresh_as(Session::Login(Login), vec![SetRole(Group)])],
                ),
            ],
        },
        Row {
            case: "(3) through an application's SECURITY DEFINER wrapper",
            session: Session::Login(Caller),
            steps: vec![Step {
                prelude: vec![],
                call: Call::Wrapper,
                // The outer calling role, not the wrapper's owner.
                owner: Caller,
                seen_by: vec![Viewer::Wrapper(Caller)],
                unseen_by: vec![fresh(WrapperOwner)],
            }],
        },
        Row {
            case: "(4) SET SESSION AUTHORIZATION by a superuser",
            session: Session::Superuser,
            steps: vec![step(
                vec![SessionAuthorization(Authorized)],
                Authorized,
                vec![fresh(Authorized), Viewer::ThisSession],
                vec![fresh_as(Session::Superuser, vec![])],
            )],
        },
        Row {
            case: "(5) a role granted idempotency_admin",
            session: Session::Login(Admin),
            steps: vec![step(
                vec![],
                Admin,
                vec![fresh(Admin)],
                vec![fresh(Login), fresh_as(Session::Superuser, vec![])],
            )],
        },
        Row {
            case: "(6a) a role named with capitals, spaces and a double quote, logged in",
            session: Session::Login(Odd),
            steps: vec![step(
                vec![],
                Odd,
                vec![fresh(Odd), fresh_as(Session::Superuser, vec![SetRole(Odd)])],
                vec![fresh_as(Session::Superuser, vec![])],
            )],
        },
        Row {
            case: "(6b) the same role, SET ROLE to it by a superuser",
            session: Session::Superuser,
            steps: vec![step(
                vec![SetRole(Odd)],
                Odd,
                vec![fresh(Odd), Viewer::ThisSession],
                vec![fresh_as(Session::Superuser, vec![])],
            )],
        },
    ]
}

/// The roles of one test, and the application schema holding the wrapper.
struct Cast {
    roles: HashMap<Who, TestRole>,
    app: String,
}

impl Cast {
    fn new() -> Cast {
        let dsn = dsn();
        let mut c = connect();
        let mut roles = HashMap::new();
        let group = TestRole::create(&dsn, "id_group", "IN ROLE idempotency_user");
        let in_group = format!("IN ROLE idempotency_user, {}", group.ident());
        roles.insert(Who::Login, TestRole::create(&dsn, "id_login", &in_group));
        roles.insert(
            Who::Member,
            TestRole::create(&dsn, "id_member", &format!("IN ROLE {}", group.ident())),
        );
        roles.insert(Who::Group, group);
        for (who, name, clause) in [
            (
                Who::WrapperOwner,
                "id_wrapper_owner",
                "IN ROLE idempotency_user",
            ),
            (Who::Caller, "id_caller", ""),
            (Who::Authorized, "id_authorized", "IN ROLE idempotency_user"),
            (Who::Admin, "id_admin", "IN ROLE idempotency_admin"),
        ] {
            roles.insert(who, TestRole::create(&dsn, name, clause));
        }
        // A name only a quoted identifier can spell; renamed after creation because the
        // helper quotes without doubling quotes.
        let mut odd = TestRole::create(&dsn, "id_odd", "IN ROLE idempotency_user");
        let odd_name = format!("Id \"Odd\" Name {}", &odd.name[7..]);
        c.batch_execute(&format!(
            "ALTER ROLE {} RENAME TO \"{}\"",
            odd.ident(),
            odd_name.replace('"', "\"\"")
        ))
        .unwrap();
        odd.name = odd_name;
        roles.insert(Who::Odd, odd);

        let app = scope("id_app").replace('-', "_");
        let api: String = c
            .query_one(
                "SELECT pronamespace::regnamespace::text FROM pg_proc WHERE proname = 'idem_begin'",
                &[],
            )
            .unwrap()
            .get(0);
        let owner = roles[&Who::WrapperOwner].ident();
        let caller = roles[&Who::Caller].ident();
        // The application's own SECURITY DEFINER wrapper, the only way its caller reaches
        // pg_idempotency.
        c.batch_execute(&format!(
            "CREATE SCHEMA {app} AUTHORIZATION {owner}; \
             GRANT USAGE ON SCHEMA {app} TO {caller}; \
             SET ROLE {owner}; \
             CREATE FUNCTION {app}.claim(scope text, key text) RETURNS text \
                 LANGUAGE sql SECURITY DEFINER SET search_path = {api}, pg_catalog, pg_temp \
                 AS $$ SELECT outcome FROM idem_begin(scope, key) $$; \
             CREATE FUNCTION {app}.owner_of(scope text, key text) RETURNS text \
                 LANGUAGE sql SECURITY DEFINER SET search_path = {api}, pg_catalog, pg_temp \
                 AS $$ SELECT pg_get_userbyid(owner)::text FROM idem_lookup(scope, key) $$; \
             REVOKE EXECUTE ON FUNCTION {app}.claim(text, text), {app}.owner_of(text, text) \
                 FROM PUBLIC; \
             GRANT EXECUTE ON FUNCTION {app}.claim(text, text), {app}.owner_of(text, text) \
                 TO {caller}; \
             RESET ROLE"
        ))
        .unwrap_or_else(|e| panic!("the application's wrapper: {e}"));
        Cast { roles, app }
    }

    fn name(&self, who: Who) -> String {
        self.roles[&who].name.clone()
    }

    fn ident(&self, who: Who) -> String {
        format!("\"{}\"", self.name(who).replace('"', "\"\""))
    }

    /// A session logged in as `who` (its name may need quoting: set through Config).
    fn login(&self, who: Who) -> Client {
        let mut config: postgres::Config = dsn().parse().unwrap();
        config.user(&self.name(who));
        config
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("log in as {}: {e}", self.name(who)))
    }

    fn open(&self, session: Session, prelude: &[Prelude]) -> Result<Client, String> {
        let mut c = match session {
            Session::Superuser => connect(),
            Session::Login(who) => self.login(who),
        };
        self.open_prelude(&mut c, prelude)?;
        Ok(c)
    }

    fn call(&self, c: &mut Client, call: Call, scope: &str, key: &str) -> Result<String, String> {
        let sql = match call {
            Call::Direct => "SELECT outcome FROM idem_begin($1, $2)".to_string(),
            Call::Wrapper => format!("SELECT {}.claim($1, $2)", self.app),
        };
        c.query_one(&sql, &[&scope, &key])
            .map(|r| r.get(0))
            .map_err(|e| format!("{call:?} idem_begin: {}", error_text(&e)))
    }

    /// The owner of the record the caller of `c` sees (owner left NULL), if any.
    fn seen(
        &self,
        c: &mut Client,
        wrapper: bool,
        scope: &str,
        key: &str,
    ) -> Result<Option<String>, String> {
        let sql = if wrapper {
            format!("SELECT {}.owner_of($1, $2)", self.app)
        } else {
            "SELECT pg_get_userbyid(owner)::text FROM idem_lookup($1, $2)".to_string()
        };
        c.query_opt(&sql, &[&scope, &key])
            .map(|r| r.and_then(|r| r.get(0)))
            .map_err(|e| format!("idem_lookup: {}", error_text(&e)))
    }
}

/// SQLSTATE, message, detail and hint of a failed statement.
fn error_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{}: {} / detail: {} / hint: {}",
            db.code().code(),
            db.message(),
            db.detail().unwrap_or("-"),
            db.hint().unwrap_or("-")
        ),
        None => e.to_string(),
    }
}

/// Whose record the superuser sees naming `owner`, and every stored owner of (scope, key).
fn as_superuser(
    su: &mut Client,
    scope: &str,
    key: &str,
    owner: &str,
) -> Result<(Option<String>, Vec<String>), String> {
    let named = su
        .query_opt(
            "SELECT pg_get_userbyid(l.owner)::text FROM idem_lookup($1, $2, \
                 owner => (SELECT oid FROM pg_roles WHERE rolname = $3)::regrole) l",
            &[&scope, &key, &owner],
        )
        .map(|r| r.map(|r| r.get(0)))
        .map_err(|e| format!("superuser idem_lookup(owner => ..): {}", error_text(&e)))?;
    let stored = su
        .query(
            "SELECT pg_get_userbyid(owner)::text FROM idempotency.records \
             WHERE scope = $1 AND key = $2 ORDER BY 1",
            &[&scope, &key],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok((named, stored))
}

/// What is wrong with one row (empty: it holds).
fn run_row(cast: &Cast, row: &Row) -> Result<Vec<String>, String> {
    let scope = scope("identity");
    let mut problems = Vec::new();
    let mut su = connect();
    let mut session = cast.open(row.session, &[])?;
    for (i, step) in row.steps.iter().enumerate() {
        let key = format!("step-{i}");
        let owner = cast.name(step.owner);
        cast.open_prelude(&mut session, &step.prelude)?;
        let outcome = cast.call(&mut session, step.call, &scope, &key)?;
        if outcome != "claimed" {
            problems.push(format!("step {i}: outcome {outcome}, expected claimed"));
        }
        let wrapper = matches!(step.call, Call::Wrapper);
        let mine = cast.seen(&mut session, wrapper, &scope, &key)?;
        if mine.as_deref() != Some(owner.as_str()) {
            problems.push(format!(
                "step {i}: the calling session sees owner {mine:?}, expected {owner:?}"
            ));
        }
        let (named, stored) = as_superuser(&mut su, &scope, &key, &owner)?;
        if named.as_deref() != Some(owner.as_str()) {
            problems.push(format!(
                "step {i}: the superuser naming owner {owner:?} sees {named:?}"
            ));
        }
        if stored != vec![owner.clone()] {
            problems.push(format!(
                "step {i}: stored owners {stored:?}, expected exactly [{owner:?}]"
            ));
        }
    }
    for (i, step) in row.steps.iter().enumerate() {
        let key = format!("step-{i}");
        let owner = cast.name(step.owner);
        let views = step
            .seen_by
            .iter()
            .map(|v| (v, Some(owner.clone())))
            .chain(step.unseen_by.iter().map(|v| (v, None)));
        for (viewer, expected) in views {
            let seen = match viewer {
                Viewer::ThisSession => cast.seen(&mut session, false, &scope, &key)?,
                Viewer::Fresh(s, prelude) => {
                    let mut c = cast.open(*s, prelude)?;
                    cast.seen(&mut c, false, &scope, &key)?
                }
                Viewer::Wrapper(who) => {
                    let mut c = cast.login(*who);
                    cast.seen(&mut c, true, &scope, &key)?
                }
            };
            if seen != expected {
                problems.push(format!(
                    "step {i}: {viewer:?} sees {seen:?}, expected {expected:?}"
                ));
            }
        }
    }
    Ok(problems)
}

impl Cast {
    fn open_prelude(&self, c: &mut Client, prelude: &[Prelude]) -> Result<(), String> {
        for p in prelude {
            let sql = match p {
                Prelude::SetRole(who) => format!("SET ROLE {}", self.ident(*who)),
                Prelude::ResetRole => "RESET ROLE".to_string(),
                Prelude::SessionAuthorization(who) => {
                    format!("SET SESSION AUTHORIZATION {}", self.ident(*who))
                }
            };
            c.batch_execute(&sql).map_err(|e| format!("{sql}: {e}"))?;
        }
        Ok(())
    }
}

#[test]
fn the_owner_of_a_record_is_the_outer_calling_role() {
    let cast = Cast::new();
    let mut failures = Vec::new();
    for row in table() {
        match run_row(&cast, &row) {
            Ok(problems) => {
                failures.extend(problems.into_iter().map(|p| format!("{}: {p}", row.case)))
            }
            Err(e) => failures.push(format!("{}: {e}", row.case)),
        }
    }
    assert!(
        failures.is_empty(),
        "identity rule:\n{}",
        failures.join("\n")
    );
}

/// Row (3)'s premise: the wrapper's caller cannot call pg_idempotency itself.
#[test]
fn the_wrappers_caller_cannot_call_the_api_directly() {
    let cast = Cast::new();
    let mut c = cast.login(Who::Caller);
    let err = try_begin(&mut c, &scope("identity"), "k", None, None, None).unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{}", error_text(&err));
    let outcome = cast
        .call(&mut c, Call::Wrapper, &scope("identity"), "k")
        .unwrap();
    assert_eq!(outcome, "claimed");
}

const NOT_ADMIN: &str =
    "only members of idempotency_admin may see or forget another role's records";
const NOT_ADMIN_HINT: &str =
    "Leave owner NULL to act on your own records, or grant idempotency_admin.";

/// Every column of the stored records of a scope, as text.
fn stored_rows(su: &mut Client, scope: &str) -> Vec<String> {
    su.query(
        "SELECT (r.*)::text FROM idempotency.records r WHERE r.scope = $1 ORDER BY r.key, r.owner::text",
        &[&scope],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// `SELECT * FROM <function>(scope, key, owner => <role by name>)`.
fn naming_owner(
    c: &mut Client,
    function: &str,
    scope: Option<&str>,
    key: &str,
    owner: &str,
) -> Result<Vec<postgres::Row>, postgres::Error> {
    c.query(
        &format!(
            "SELECT * FROM {function}($1, $2, \
                 owner => (SELECT oid FROM pg_roles WHERE rolname = $3)::regrole)"
        ),
        &[&scope, &key, &owner],
    )
}

#[test]
fn an_admin_sees_and_forgets_anyones_records() {
    let cast = Cast::new();
    let scope = scope("identity-admin");
    let other = cast.name(Who::Authorized);
    let mut x = cast.login(Who::Authorized);
    assert_eq!(begin(&mut x, &scope, "k").outcome, "claimed");

    let mut admin = cast.login(Who::Admin);
    assert_eq!(
        cast.seen(&mut admin, false, &scope, "k").unwrap(),
        None,
        "owner NULL: the admin's own records, and it has none"
    );
    let rows = naming_owner(&mut admin, "idem_lookup", Some(&scope), "k", &other).unwrap();
    assert_eq!(rows.len(), 1, "the admin sees another role's record");
    let owner: String = admin
        .query_one(
            "SELECT pg_get_userbyid(owner)::text FROM idem_lookup($1, 'k', \
                 owner => (SELECT oid FROM pg_roles WHERE rolname = $2)::regrole)",
            &[&scope, &other],
        )
        .unwrap()
        .get(0);
    assert_eq!(owner, other);

    let forgot = naming_owner(&mut admin, "idem_forget", Some(&scope), "k", &other).unwrap();
    assert!(
        forgot[0].get::<_, bool>(0),
        "the admin forgets another role's record"
    );
    assert_eq!(
        cast.seen(&mut x, false, &scope, "k").unwrap(),
        None,
        "gone for its owner"
    );
    assert_eq!(stored_rows(&mut connect(), &scope), Vec::<String>::new());
    let again = naming_owner(&mut admin, "idem_forget", Some(&scope), "k", &other).unwrap();
    assert!(!again[0].get::<_, bool>(0), "nothing left to forget");
}

#[test]
fn naming_another_owner_without_admin_is_refused_alike_whether_or_not_a_record_exists() {
    let cast = Cast::new();
    let caller = cast.name(Who::Login);
    let other = cast.name(Who::Authorized);
    // A role with no records anywhere.
    let stranger = cast.name(Who::WrapperOwner);
    let mut su = connect();
    for function in ["idem_lookup", "idem_forget"] {
        let scope = scope("identity-refused");
        let mut x = cast.login(Who::Authorized);
        assert_eq!(begin(&mut x, &scope, "k").outcome, "claimed");
        let before = stored_rows(&mut su, &scope);
        assert_eq!(before.len(), 1);

        let mut c = cast.login(Who::Login);
        let refused = |c: &mut Client, key: &str, owner: &str| {
            let e = naming_owner(c, function, Some(&scope), key, owner)
                .err()
                .unwrap_or_else(|| panic!("{function} naming {owner} as {caller}: no error"));
            assert_eq!(sqlstate(&e), "42501", "{function}: {}", error_text(&e));
            error_text(&e)
        };
        let exists = refused(&mut c, "k", &other);
        let absent = refused(&mut c, "never-used", &other);
        let nobodys = refused(&mut c, "never-used", &stranger);
        assert_eq!(
            exists,
            format!(
                "42501: {NOT_ADMIN} / detail: The call named owner {other}; the calling role is \
                 {caller}. / hint: {NOT_ADMIN_HINT}"
            ),
            "{function}"
        );
        assert_eq!(exists, absent, "{function}: a record's existence shows");
        assert_eq!(
            nobodys.replace(&stranger, &other),
            exists,
            "{function}: identical except the names"
        );
        assert_eq!(
            stored_rows(&mut su, &scope),
            before,
            "{function}: the record is intact"
        );

        // Arguments are checked first: a NULL scope is 22023 whoever is named.
        let e = naming_owner(&mut c, function, None, "k", &other).unwrap_err();
        assert_eq!(sqlstate(&e), "22023", "{function}: {}", error_text(&e));
        // Naming oneself is acting on one's own records.
        naming_owner(&mut c, function, Some(&scope), "k", &caller)
            .unwrap_or_else(|e| panic!("{function} naming the caller: {}", error_text(&e)));
        assert_eq!(
            stored_rows(&mut su, &scope),
            before,
            "{function}: the record is intact"
        );
    }
}
